#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""etcd.py -- dlockd against etcd's lock service, side by side in one run
on this machine.

etcd's lock is what a Go program that wants "a lock" from etcd calls:
concurrency.Mutex, or its server side, the v3lock service (Lock/Unlock
with a lease), which runs the same recipe inside the server: Lock puts
<name>/<lease> under the lease in a transaction and, when older keys are
under the name, waits for the one just before it to go (a watch on its
deletion: FIFO by creation revision); Unlock deletes the key. The driver
etcdbench (tests/bench/etcdbench, Go standard library only) calls it
through etcd's JSON gRPC gateway, one HTTP/1.1 keep-alive connection and
one lease per client (the "etcd" column, against which the ratios are
taken), and, to show what the gateway costs, by gRPC itself over an
HTTP/2 TLS connection per client ("etcd gRPC": what clientv3 would send;
TLS because the standard library speaks HTTP/2 only over TLS).

Both servers are private and equally durable -- every acknowledged grant
is on disk:

  etcd    a one-member cluster on loopback ports, its own data dir, the
          default durability (the WAL is fsync'ed before a write is
          answered)
  dlockd  on a private redis-server, appendonly yes, appendfsync always
          (a grant is answered once the Redis batch holding it is
          fsync'ed)

Rows, each driver with the command line of tests/bench/clients.py:

  pairs    N clients, each locking a name of its own and unlocking it
  handoff  N clients on ONE lock, each waiting for it (FIFO), unlocking
           it at once and asking again; the wait of each acquisition

The dlockd columns are run with libdlock (clientbench) and with the Go
client (gobench), the etcd ones with etcdbench; every figure is the median
of BENCH_REPS runs of BENCH_DURATION s, the four alternating within each
repetition. Server CPU is utime+stime from /proc/<pid>/stat around each
run (dlockd's counts its redis-server too); the CPU the rest of the
machine took meanwhile is printed, as a measure of the noise.

etcd's handoff row is bound by its watch machinery, not by its disk: a
waiter watches the key before its own from the revision of the read
that found it, not above the store's current revision, so etcd files
the watch as "unsynced" and catches it up in a loop that runs every
100 ms: a client that queues again waits for the next tick (about N
hand-offs per 100 ms with N clients, waits of ~100 ms).

The table goes to stdout and to --out. Environment: DLOCKD, CLIENTBENCH, GOBENCH, ETCDBENCH, ETCD
(/usr/bin/etcd), BENCH_REPS (3), BENCH_DURATION (3), BENCH_PAIR_CLIENTS
("1 16"), BENCH_HANDOFF_CLIENTS (8), BENCH_DURABLE_RELEASE (no: dlockd's
default, a release answered at once; yes: releases wait for Redis too,
as etcd's Unlock waits for its WAL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))

REPS = int(os.environ.get("BENCH_REPS", "3"))
DURATION = float(os.environ.get("BENCH_DURATION", "3"))
PAIR_CLIENTS = [int(x) for x in os.environ.get("BENCH_PAIR_CLIENTS", "1 16").split()]
HANDOFF_CLIENTS = int(os.environ.get("BENCH_HANDOFF_CLIENTS", "8"))
DURABLE_RELEASE = os.environ.get("BENCH_DURABLE_RELEASE", "no")
TICK = os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def cpu(pids: list[int]) -> float:
    """utime + stime of the processes, in seconds."""
    t = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
    return t / TICK


def busy() -> float:
    """CPU seconds the user-space processes of the machine spent: user, nice
    and system of /proc/stat (not the interrupts, which no process is
    charged), less the kernel threads' (the journal's fsync work among
    them, which both servers cause)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    kthreads = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit():
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if not f.read(1):  # a kernel thread has no command line
                        kthreads.append(int(pid))
        except OSError:
            pass
    k = 0.0
    for pid in kthreads:
        try:
            k += cpu([pid])
        except (OSError, IndexError):
            pass
    return (v[0] + v[1] + v[2]) / TICK - k


def one_run(cmd: list[str], mode: str, server: str, clients: int, pids: list[int],
            secs: float = DURATION) -> dict:
    c0 = cpu(pids)
    out = subprocess.run(cmd + [mode, server, str(clients), f"{secs:g}"],
                         check=True, capture_output=True, text=True, timeout=secs + 120)
    c1 = cpu(pids)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    w = r["waits_ms"]
    return {"rate": r["ops"] / r["secs"], "errors": r["errors"],
            "p50": pct(w, 50), "p99": pct(w, 99),
            "cpu": (c1 - c0) * 1e6 / max(r["ops"], 1)}  # ms per 1000 ops


class Etcd:
    """A private one-member etcd on free loopback ports, stopped by PID: a
    plain HTTP client URL (the JSON gateway, and gRPC) and an HTTPS one
    (gRPC over HTTP/2 for etcdbench's grpcs:// mode; a throwaway
    self-signed certificate)."""

    def __init__(self, binary: str) -> None:
        from procs import free_port, wait_port  # noqa: E402 (tests/python)
        self.dir = tempfile.mkdtemp(prefix="dlockd-bench-etcd-")
        ports: list[int] = []
        while len(ports) < 3:
            p = free_port()
            if p not in ports:
                ports.append(p)
        self.port, tport, peer = ports
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_url = f"grpcs://127.0.0.1:{tport}"
        turl = f"https://127.0.0.1:{tport}"
        purl = f"http://127.0.0.1:{peer}"
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [binary, "--name", "bench", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", f"{self.url},{turl}",
             "--advertise-client-urls", f"{self.url},{turl}",
             "--cert-file", cert, "--key-file", key,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"bench={purl}", "--initial-cluster-state", "new",
             "--logger", "zap", "--log-level", "error"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        ok = wait_port(self.port, 20, self.proc) and wait_port(tport, 20, self.proc)
        end = time.monotonic() + 20
        while ok and time.monotonic() < end:  # the port opens before a leader is elected
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if json.load(r).get("health") == "true":
                        break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            self.cleanup()
            raise RuntimeError("etcd does not start")

    def version(self) -> str:
        with urllib.request.urlopen(self.url + "/version", timeout=5) as r:
            return json.load(r).get("etcdserver", "?")

    def cleanup(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.proc = None
        subprocess.run(["rm", "-rf", self.dir])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(TOP, "build", "bench", "etcd.txt"))
    args = ap.parse_args()

    from procs import Daemon, Redis  # noqa: E402 (tests/python)

    bench = os.path.join(TOP, "build", "tests", "bench")
    cmds = {
        "dlockd C": [os.environ.get("CLIENTBENCH", os.path.join(bench, "clientbench"))],
        "dlockd Go": [os.environ.get("GOBENCH", os.path.join(bench, "gobench"))],
        "etcd": [os.environ.get("ETCDBENCH", os.path.join(bench, "etcdbench"))],
    }
    cmds["etcd gRPC"] = cmds["etcd"]
    etcd_bin = os.environ.get("ETCD", "/usr/bin/etcd")
    for name, cmd in list(cmds.items()) + [("etcd server", [etcd_bin])]:
        if name == "etcd gRPC":
            continue
        if not os.access(shutil.which(cmd[0]) or cmd[0], os.X_OK):
            print(f"etcd.py: {name}: {cmd[0]} is missing", file=sys.stderr)
            return 1
    names = list(cmds)

    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    plan = [(f"pairs{n}", "pairs", n) for n in PAIR_CLIENTS]
    plan.append(("handoff", "handoff", HANDOFF_CLIENTS))
    rows: dict[str, dict[str, list[dict]]] = {}
    rd = et = d = None
    try:
        rd = Redis("always")
        conf = None
        if DURABLE_RELEASE == "yes":
            conf = "[persistence]\ndurable_release = yes\n"
        d = Daemon("--persist", "redis", "--redis", rd.url, conf=conf).start()
        et = Etcd(etcd_bin)
        assert d.proc is not None and rd.proc is not None and et.proc is not None
        target = {"dlockd C": (d.addr, [d.proc.pid, rd.proc.pid]),
                  "dlockd Go": (d.addr, [d.proc.pid, rd.proc.pid]),
                  "etcd": (et.url, [et.proc.pid]),
                  "etcd gRPC": (et.grpc_url, [et.proc.pid])}
        say("dlockd against etcd's lock service (v3lock), side by side (tests/bench/etcd.py)")
        say(f"date:    {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
        say(f"machine: nproc={os.cpu_count()}, Linux {os.uname().release}")
        say(f"method:  dlockd on a redis-server, appendonly yes, appendfsync always, "
            f"durable_release {DURABLE_RELEASE}; etcd {et.version()}, one member, "
            "default durability (WAL fsync'ed per commit), its lock service through "
            "the JSON gateway (HTTP/1.1, the etcd column) and by gRPC (HTTP/2 over "
            "TLS, etcd gRPC), one lease per client; one connection per "
            f"client; medians of {REPS} runs of {DURATION:g} s, the drivers "
            "alternating; CPU = server utime+stime per 1000 ops "
            "(dlockd's includes its redis-server); ratio = dlockd (Go or C) / etcd "
            "(gateway), Go/gRPC = dlockd Go / etcd gRPC")
        for name in names:  # warm-up, not counted
            one_run(cmds[name], "pairs", target[name][0], 4, target[name][1], 1)
        # What the rest of the machine burnt meanwhile: all CPU but the
        # servers', the drivers' (children) and this script's.
        ours = [d.proc.pid, rd.proc.pid, et.proc.pid]
        b0, c0, t0 = busy(), cpu(ours) + sum(os.times()[:4]), time.monotonic()
        for row, mode, n in plan:
            print(f"bench-etcd: {row}", file=sys.stderr, flush=True)
            rows[row] = {name: [] for name in names}
            for _ in range(REPS):
                for name in names:
                    rows[row][name].append(one_run(cmds[name], mode, target[name][0], n,
                                                   target[name][1]))
        other = (busy() - b0 - (cpu(ours) + sum(os.times()[:4]) - c0)) / (time.monotonic() - t0)
    finally:
        for p in (d, et, rd):
            if p is not None:
                p.cleanup()

    def med(row: str, name: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[row][name])

    say()
    say(f"{'scenario':34}" + "".join(f"{n:>11}" for n in names)
        + f"{'Go/etcd':>9}{'C/etcd':>9}{'Go/gRPC':>9}")

    def row_line(label: str, row: str, key: str, fmt: str) -> None:
        v = {n: med(row, n, key) for n in names}
        say(f"{label:34}" + "".join(f"{v[n]:11{fmt}}" for n in names)
            + f"{v['dlockd Go'] / v['etcd']:9.2f}{v['dlockd C'] / v['etcd']:9.2f}"
            + f"{v['dlockd Go'] / v['etcd gRPC']:9.2f}")

    for row, mode, n in plan:
        if mode == "pairs":
            row_line(f"lock+unlock pairs/s, {n} client{'s' if n > 1 else ''}",
                     row, "rate", ".0f")
            row_line("  server CPU ms / 1000 pairs", row, "cpu", ".1f")
    say(f"  contended: {HANDOFF_CLIENTS} clients on one lock, FIFO hand-offs")
    row_line("  hand-offs/s", "handoff", "rate", ".0f")
    row_line("  wait p50, ms", "handoff", "p50", ".2f")
    row_line("  wait p99, ms", "handoff", "p99", ".2f")
    row_line("  server CPU ms / 1000 hand-offs", "handoff", "cpu", ".1f")
    say(f"other processes on the machine during the runs: {max(other, 0):.2f} cores "
        "on average (noise if well above 0)")
    errs = {n: sum(r["errors"] for rr in rows.values() for r in rr[n]) for n in names}
    say("failed calls (all runs): " + ", ".join(f"{n} {e}" for n, e in errs.items()))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"(table in {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
