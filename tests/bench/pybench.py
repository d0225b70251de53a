#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pybench.py -- `make bench-python`: the Python client against redis-py's
Lock, side by side, in one run on this machine.

Both sides run the same Python loops in worker processes (one client per
process) and stand on a redis-server of equal durability (AOF, the same
appendfsync): dlockd.Client through a dlockd on its own redis-server, and
redis.lock.Lock (SET NX PX to take, a Lua compare-and-delete to release)
on another. Rows:

  pairs      each process takes and releases locks of its own names, one
             after the other (lock with wait=0 / acquire(blocking=False));
             lock+release pairs per second, all processes together
  handoff    every process takes ONE lock, waiting for it (wait=None /
             acquire(blocking=True), which redis-py does by retrying every
             `sleep` seconds: its default 0.1, and 0.001), releases at
             once, and asks again; grants (handoffs) per second, and the
             wait of each acquisition (from the call to the grant): p50,
             p99, the longest

Every figure is the median of REPS runs of DURATION s (the runs of a row
alternate between the sides); the table goes to stdout and to --out.
Environment: DLOCKD (build/dlockd), BENCH_REPS (3), BENCH_DURATION (3),
BENCH_PAIR_PROCS (4), BENCH_HANDOFF_PROCS (8), BENCH_FSYNC ("always
everysec").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "client", "python"))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))

REPS = int(os.environ.get("BENCH_REPS", "3"))
DURATION = float(os.environ.get("BENCH_DURATION", "3"))
PAIR_PROCS = int(os.environ.get("BENCH_PAIR_PROCS", "4"))
HANDOFF_PROCS = int(os.environ.get("BENCH_HANDOFF_PROCS", "8"))
FSYNCS = os.environ.get("BENCH_FSYNC", "always everysec").split()
LOCK_TTL = 10.0  # s: longer than any run; nothing expires


# ---- a worker process ----------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    """One process of a run: its loop until args.end (a CLOCK_MONOTONIC
    time shared by every worker), then one JSON line."""
    n = 0
    waits: list[float] = []
    name_base = f"b{args.tag}.{os.getpid()}"
    if args.side == "dlockd":
        import dlockd

        c = dlockd.Client(f"127.0.0.1:{args.port}")
        while time.monotonic() < args.start:
            time.sleep(0.001)
        if args.mode == "pairs":
            i = 0
            while time.monotonic() < args.end:
                c.lock(f"{name_base}.{i % 64}", ttl=LOCK_TTL, wait=0).release()
                i += 1
                n += 1
        else:
            while time.monotonic() < args.end:
                t0 = time.monotonic()
                lease = c.lock(f"hot{args.tag}", ttl=LOCK_TTL, wait=None)
                waits.append(time.monotonic() - t0)
                lease.release()
                n += 1
        c.close()
    else:
        import redis

        r = redis.Redis(port=args.port)
        while time.monotonic() < args.start:
            time.sleep(0.001)
        if args.mode == "pairs":
            i = 0
            while time.monotonic() < args.end:
                lk = r.lock(f"{name_base}.{i % 64}", timeout=LOCK_TTL)
                if not lk.acquire(blocking=False):
                    raise SystemExit("a pair's lock was busy")
                lk.release()
                i += 1
                n += 1
        else:
            while time.monotonic() < args.end:
                lk = r.lock(f"hot{args.tag}", timeout=LOCK_TTL, sleep=args.sleep)
                t0 = time.monotonic()
                lk.acquire(blocking=True)
                waits.append(time.monotonic() - t0)
                lk.release()
                n += 1
    # acquisitions that began before the end count; the rate divides by
    # the run's length
    print(json.dumps({"n": n, "waits": waits}))


# ---- the driver -------------------------------------------------------------------


def one_run(side: str, port: int, mode: str, procs: int, tag: str, sleep: float) -> dict:
    start = time.monotonic() + 1.0  # time for every worker to connect
    end = start + DURATION
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--side", side,
           "--port", str(port), "--mode", mode, "--tag", tag,
           "--start", repr(start), "--end", repr(end), "--sleep", repr(sleep)]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE) for _ in range(procs)]
    outs = []
    for p in ps:
        out, _ = p.communicate(timeout=DURATION + 60)
        if p.returncode != 0:
            raise RuntimeError(f"{side} {mode}: a worker failed")
        outs.append(json.loads(out))
    waits = sorted(w for o in outs for w in o["waits"])
    res = {"rate": sum(o["n"] for o in outs) / DURATION}
    if waits:
        res["p50"] = waits[len(waits) // 2] * 1000
        res["p99"] = waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1000
        res["max"] = waits[-1] * 1000
        per = [len(o["waits"]) for o in outs]
        res["fair"] = f"{min(per)}..{max(per)}"
    return res


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    c.add_argument("--side")
    c.add_argument("--port", type=int)
    c.add_argument("--mode")
    c.add_argument("--tag")
    c.add_argument("--start", type=float)
    c.add_argument("--end", type=float)
    c.add_argument("--sleep", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(TOP, "build", "bench", "python.txt"))
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
        return 0

    import redis  # noqa: F401  (fail early: python3-redis is needed)

    from procs import Daemon, Redis

    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    say("dlockd Python client against redis-py's Lock (make bench-python)")
    say(f"date:    {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    say(f"machine: nproc={os.cpu_count()}, Linux {os.uname().release}; "
        f"Python {sys.version.split()[0]}, redis-py {redis.__version__}")
    say(f"method:  worker processes, one client each; medians of {REPS} runs of "
        f"{DURATION:g} s, the sides alternating; ratio = dlockd / redis-py")
    seq = 0
    for fsync in FSYNCS:
        rd, rr = Redis(fsync), Redis(fsync)
        d = Daemon("--persist", "redis", "--redis", rd.url).start()
        try:
            rows: dict[str, dict[str, list[dict]]] = {}
            plan = [
                ("pairs1", "pairs", 1, [("dlockd", 0.0), ("redis", 0.0)]),
                ("pairsN", "pairs", PAIR_PROCS, [("dlockd", 0.0), ("redis", 0.0)]),
                ("handoff", "handoff", HANDOFF_PROCS,
                 [("dlockd", 0.0), ("redis", 0.1), ("redis1ms", 0.001)]),
            ]
            for row, mode, procs, sides in plan:
                print(f"bench-python: {fsync}: {row}", file=sys.stderr, flush=True)
                rows[row] = {s: [] for s, _ in sides}
                for _ in range(REPS):
                    for side, sleep in sides:
                        seq += 1
                        port = d.port if side == "dlockd" else rr.port
                        rows[row][side].append(one_run(
                            "dlockd" if side == "dlockd" else "redis", port, mode,
                            procs, f"{seq}", sleep))
        finally:
            d.cleanup()
            rd.cleanup()
            rr.cleanup()
        say()
        say(f"appendfsync {fsync} (both Redis servers: appendonly yes)")
        say(f"{'scenario':44} {'dlockd':>10} {'redis-py':>10} {'ratio':>6}")

        def rate_row(label: str, row: str, other: str = "redis") -> None:
            a, b = median_of(rows[row]["dlockd"], "rate"), median_of(rows[row][other], "rate")
            say(f"{label:44} {a:10.0f} {b:10.0f} {a / b:6.2f}")

        def wait_row(label: str, key: str, other: str) -> None:
            a, b = median_of(rows["handoff"]["dlockd"], key), median_of(rows["handoff"][other], key)
            say(f"{label:44} {a:10.1f} {b:10.1f} {a / b:6.3f}")

        rate_row("lock+release pairs/s, 1 process", "pairs1")
        rate_row(f"lock+release pairs/s, {PAIR_PROCS} processes", "pairsN")
        for other, label in (("redis", "redis-py retrying every 0.1 s (its default)"),
                             ("redis1ms", "redis-py retrying every 1 ms")):
            say(f"  contended, {HANDOFF_PROCS} processes on one lock; {label}:")
            rate_row("  handoffs/s", "handoff", other)
            wait_row("  wait p50, ms", "p50", other)
            wait_row("  wait p99, ms", "p99", other)
            wait_row("  longest wait, ms", "max", other)
            say(f"{'  grants per process, min..max (last run)':44} "
                f"{rows['handoff']['dlockd'][-1]['fair']:>10} {rows['handoff'][other][-1]['fair']:>10}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"(table in {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
