# SPDX-License-Identifier: MIT
"""benchd.py -- what the Python benchmarks of tests/bench share: a dlockd
of their own on a free port, and the CPU a process has used.

    with benchd.daemon(dlockd, log, "-c", conf) as (port, proc): ...
"""
import contextlib
import os
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process pid (/proc)."""
    with open("/proc/%d/stat" % pid) as f:
        w = f.read().rsplit(")", 1)[1].split()
    return (int(w[11]) + int(w[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def daemon(dlockd: str, log, *args: str):
    """dlockd --persist none on a free port (args before), logging
    warnings to the file `log`; yields (port, process) once it accepts
    connections, and stops it after."""
    port = free_port()
    p = subprocess.Popen(
        [dlockd, *args, "--persist", "none", "-p", str(port), "-l", "warning"],
        stdout=log, stderr=log,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port, p
    finally:
        p.terminate()
        p.wait()
