# SPDX-License-Identifier: MIT
"""Real parts for the Python tests: dlockd and redis-server processes.

Each process runs under its own temporary directory, on a free port of
127.0.0.1, and is stopped by PID (SIGTERM, then SIGKILL). The daemon is
$DLOCKD (default build/dlockd); its stderr goes to <dir>/dlockd.log, which
a failing start prints. The fault campaign's Python worker and the
benchmark use the same helpers.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DLOCKD = os.environ.get("DLOCKD", os.path.join(TOP, "build", "dlockd"))


# Ports come from below the kernel's ephemeral range (32768 and up): a
# port bind(0) hands out may become the local port of another process's
# outgoing connection while its server restarts, which then cannot bind it.
PORT_LO, PORT_SPAN = 20000, 12000
_rng = random.Random()


def free_port() -> int:
    for _ in range(1000):
        port = PORT_LO + _rng.randrange(PORT_SPAN)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.01)
    return False


class Redis:
    """A private redis-server with AOF (appendfsync as given)."""

    def __init__(self, appendfsync: str = "always") -> None:
        self.dir = tempfile.mkdtemp(prefix="dlockd-pytest-redis-")
        self.port = free_port()
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--maxmemory-policy", "noeviction"]
        if self.appendfsync == "off":
            args += ["--appendonly", "no"]
        else:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        if not wait_port(self.port, 10, self.proc):
            raise RuntimeError("redis-server does not start")
        end = time.monotonic() + 10
        while self.cli("PING") != "PONG" and time.monotonic() < end:
            time.sleep(0.02)

    def cli(self, *args: str) -> str:
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip()

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        subprocess.run(["rm", "-rf", self.dir])


class Daemon:
    """A dlockd process on a free port (kept across restarts)."""

    def __init__(self, *args: str, port: int | None = None, conf: str | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="dlockd-pytest-")
        self.port = port or free_port()
        self.args = list(args)
        self.log = os.path.join(self.dir, "dlockd.log")
        self.conf = None
        if conf is not None:
            self.conf = self.file("dlockd.conf", conf)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def file(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def start(self, wait: bool = True) -> Daemon:
        cmd = [DLOCKD, "--port", str(self.port)]
        if self.conf:
            cmd += ["-c", self.conf]
        cmd += self.args
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        if wait and not wait_port(self.port, 20, self.proc):
            raise RuntimeError(f"dlockd does not start: {self.read_log()[-2000:]}")
        return self

    def read_log(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> int:
        if self.proc is None:
            return 0
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.proc.terminate()
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def restart(self, wait: bool = True) -> Daemon:
        return self.start(wait)

    def cleanup(self) -> None:
        self.stop()
        subprocess.run(["rm", "-rf", self.dir])


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def wait_until(pred, timeout: float, step: float = 0.01) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
