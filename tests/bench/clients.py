#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""clients.py -- `make bench-clients`: the client libraries of the
repository side by side on one daemon, in one run on this machine.

Each library has a driver with the same command line and output
(clientbench.c on libdlock, gobench on the Go client, pyclientbench.py
on the Python client -- a process per client --, and the Java client's
when given):

    <driver> pairs|handoff <servers> <clients> <seconds>
    -> {"ops": n, "secs": s, "errors": e, "waits_ms": [...]}

and every driver stands on the same dlockd, on a redis-server with AOF
and appendfsync everysec (BENCH_FSYNC). Rows:

  pairs    N clients (each one connection and one owner), each taking
           and releasing a lock of its own name (wait 0): pairs/s
  handoff  N clients on ONE lock, each waiting for it (FIFO), releasing
           it at once and asking again: grants/s, and the wait of each
           acquisition from the call to the grant (p50, p99)

Every figure is the median of BENCH_REPS runs of BENCH_DURATION s, the
drivers alternating within each repetition so that a noisy moment hits
all of them; ratio = the library / libdlock. The table goes to stdout and
to --out. Environment: DLOCKD, CLIENTBENCH, GOBENCH, JAVABENCH (a command
line, words split on spaces; empty: no Java row), BENCH_REPS (3),
BENCH_DURATION (3), BENCH_PAIR_CLIENTS ("1 16"), BENCH_HANDOFF_CLIENTS
(8), BENCH_FSYNC (everysec).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))

REPS = int(os.environ.get("BENCH_REPS", "3"))
DURATION = float(os.environ.get("BENCH_DURATION", "3"))
PAIR_CLIENTS = [int(x) for x in os.environ.get("BENCH_PAIR_CLIENTS", "1 16").split()]
HANDOFF_CLIENTS = int(os.environ.get("BENCH_HANDOFF_CLIENTS", "8"))
FSYNC = os.environ.get("BENCH_FSYNC", "everysec")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def one_run(cmd: list[str], mode: str, servers: str, clients: int) -> dict:
    out = subprocess.run(cmd + [mode, servers, str(clients), f"{DURATION:g}"],
                         check=True, capture_output=True, text=True,
                         timeout=DURATION + 120)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    w = r["waits_ms"]
    return {"rate": r["ops"] / r["secs"], "errors": r["errors"],
            "p50": pct(w, 50), "p99": pct(w, 99)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(TOP, "build", "bench", "clients.txt"))
    args = ap.parse_args()

    from procs import Daemon, Redis  # noqa: E402 (tests/python)

    drivers: list[tuple[str, list[str]]] = [
        ("C", [os.environ.get("CLIENTBENCH", os.path.join(TOP, "build", "tests", "bench",
                                                           "clientbench"))]),
        ("Go", [os.environ.get("GOBENCH", os.path.join(TOP, "build", "tests", "bench",
                                                        "gobench"))]),
        ("Python", [sys.executable, os.path.join(HERE, "pyclientbench.py")]),
    ]
    if os.environ.get("JAVABENCH"):
        drivers.append(("Java", os.environ["JAVABENCH"].split()))
    for name, cmd in drivers:
        if not os.access(shutil.which(cmd[0]) or cmd[0], os.X_OK):
            print(f"clients.py: {name}: {cmd[0]} is missing (make bench-clients builds it)",
                  file=sys.stderr)
            return 1

    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    say("dlockd's client libraries side by side on one daemon (make bench-clients)")
    say(f"date:    {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    say(f"machine: nproc={os.cpu_count()}, Linux {os.uname().release}")
    say(f"method:  one daemon on a redis-server, appendonly yes, appendfsync {FSYNC}; "
        f"one connection and owner per client; medians of {REPS} runs of {DURATION:g} s, "
        "the libraries alternating; ratio = library / C (libdlock)")
    plan = [(f"pairs{n}", "pairs", n) for n in PAIR_CLIENTS]
    plan.append(("handoff", "handoff", HANDOFF_CLIENTS))
    rd = Redis(FSYNC)
    d = Daemon("--persist", "redis", "--redis", rd.url).start()
    rows: dict[str, dict[str, list[dict]]] = {}
    try:
        for row, mode, n in plan:
            print(f"bench-clients: {row}", file=sys.stderr, flush=True)
            rows[row] = {name: [] for name, _ in drivers}
            for _ in range(REPS):
                for name, cmd in drivers:
                    rows[row][name].append(one_run(cmd, mode, d.addr, n))
    finally:
        d.cleanup()
        rd.cleanup()

    def med(row: str, name: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[row][name])

    names = [name for name, _ in drivers]
    say()
    say(f"{'scenario':36}" + "".join(f"{n:>10}" for n in names)
        + "".join(f"{n + '/C':>9}" for n in names[1:]))

    def row_line(label: str, row: str, key: str, fmt: str) -> None:
        vals = [med(row, n, key) for n in names]
        say(f"{label:36}" + "".join(f"{v:10{fmt}}" for v in vals)
            + "".join(f"{v / vals[0]:9.2f}" for v in vals[1:]))

    for row, mode, n in plan:
        if mode == "pairs":
            row_line(f"lock+unlock pairs/s, {n} client{'s' if n > 1 else ''}", row, "rate", ".0f")
    say(f"  contended: {HANDOFF_CLIENTS} clients on one lock, FIFO hand-offs")
    row_line("  hand-offs/s", "handoff", "rate", ".0f")
    row_line("  wait p50, ms", "handoff", "p50", ".2f")
    row_line("  wait p99, ms", "handoff", "p99", ".2f")
    errs = {n: sum(r["errors"] for rr in rows.values() for r in rr[n]) for n in names}
    say("failed calls (all runs): " + ", ".join(f"{n} {e}" for n, e in errs.items()))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"(table in {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
