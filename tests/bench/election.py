#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""election.py -- how long an election takes to hand over (make bench-election).

Two candidates stand with `dlock elect` (one dlockd on a private
redis-server, appendfsync everysec): A leads, B waits. Then A goes, and
the time from its going to B's command starting is the hand-over:

  - resign: A's command exits; dlock releases the lease at once;
  - kill -9: A's dlock is killed (its guard stops the command); nobody
    releases the lease, which the server ends at its deadline -- what is
    left of the TTL since A's last renewal (renewals every TTL/3), plus
    the timer tick. The kill lands at a random moment of the renewal
    cycle, so the figure ranges over [2/3 TTL, TTL].

Environment: DLOCKD, DLOCK (binaries), TTLS (default "30s 5s": 30 s is
the default TTL), TRIALS (default 5 per TTL and way).
"""
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

DLOCKD = os.environ.get("DLOCKD", "build/dlockd")
DLOCK = os.environ.get("DLOCK", "build/dlock")
TTLS = os.environ.get("TTLS", "30s 5s").split()
TRIALS = int(os.environ.get("TRIALS", "5"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_file(path, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    raise RuntimeError(f"{path} did not appear within {timeout} s")


def ms(text):
    return int(text[:-1]) * 1000 if text.endswith("s") else int(text)


class Setup:
    def __init__(self, tmp):
        self.tmp = tmp
        self.rport, self.port = free_port(), free_port()
        rdir = os.path.join(tmp, "redis")
        os.mkdir(rdir)
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.rport), "--dir", rdir,
             "--appendonly", "yes", "--appendfsync", "everysec",
             "--save", "", "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        self.daemon = subprocess.Popen(
            [DLOCKD, "--port", str(self.port), "--persist", "redis",
             "--redis", f"redis://127.0.0.1:{self.rport}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "log"), "w"))
        for _ in range(500):
            if self.dlock("ping").returncode == 0:
                return
            time.sleep(0.01)
        raise RuntimeError("dlockd did not start")

    def dlock(self, *args):
        return subprocess.run([DLOCK, "--port", str(self.port), *args],
                              capture_output=True, text=True)

    def elect(self, value, ttl, script):
        return subprocess.Popen(
            [DLOCK, "--port", str(self.port), "elect", "e", "--value", value,
             "--ttl", ttl, "--", "sh", "-c", script],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def waiters(self):
        out = self.dlock("status", "e").stdout
        for line in out.splitlines():
            if line.startswith("waiters="):
                return int(line[8:])
        return -1

    def stop(self):
        for p in (self.daemon, self.redis):
            p.terminate()
            p.wait()


def trial(s, ttl, how, n):
    up_a = os.path.join(s.tmp, f"a{n}.up")
    up_b = os.path.join(s.tmp, f"b{n}.up")
    stop_a = os.path.join(s.tmp, f"a{n}.stop")
    a = s.elect("host-a", ttl,
                f"echo up > {up_a}; while [ ! -e {stop_a} ]; do sleep 0.001; done")
    wait_file(up_a, 10)
    b = s.elect("host-b", ttl, f"date +%s.%N > {up_b}; exec sleep 1000")
    while s.waiters() != 1:
        time.sleep(0.005)
    # a random moment of A's renewal cycle
    time.sleep(random.uniform(0, ms(ttl) / 3000))
    t0 = time.time()
    if how == "resign":
        open(stop_a, "w").close()
    else:
        a.send_signal(signal.SIGKILL)
    t1 = float(wait_file(up_b, ms(ttl) / 1000 * 2 + 10))
    open(stop_a, "w").close()  # a guard's command, if it outlived the kill
    a.wait()
    b.terminate()
    b.wait()
    return (t1 - t0) * 1000


def main():
    random.seed(20261130)
    with tempfile.TemporaryDirectory() as tmp:
        s = Setup(tmp)
        try:
            print(f"election hand-over, {TRIALS} trials each "
                  f"(dlock elect, redis everysec)")
            print(f"{'ttl':>6} {'way':>8} {'p50 ms':>9} {'max ms':>9} "
                  f"{'min ms':>9}")
            for ttl in TTLS:
                for how in ("resign", "kill -9"):
                    v = [trial(s, ttl, how, f"{ttl}-{how[0]}-{i}")
                         for i in range(TRIALS)]
                    print(f"{ttl:>6} {how:>8} {statistics.median(v):9.1f} "
                          f"{max(v):9.1f} {min(v):9.1f}", flush=True)
        finally:
            s.stop()


if __name__ == "__main__":
    sys.exit(main())
