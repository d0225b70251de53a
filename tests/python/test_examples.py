# SPDX-License-Identifier: MIT
"""The examples of client/examples run against a real daemon and do what
docs/guide.md (From C, From Python) says they do."""

from __future__ import annotations

import os
import subprocess
import sys

from procs import TOP

EXAMPLES = os.path.join(TOP, "client", "examples")


def run(script: str, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), "--port", str(port), *args],
        capture_output=True, text=True, timeout=120,
    )


def test_the_stock_demo_sells_exactly_the_stock(daemon):
    r = run("stock.py", daemon.port)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("sold 10 of 10 items (1000 buyers in 4 processes")


def test_a_paused_writers_late_database_write_is_refused_by_the_fence(daemon):
    r = run("fenced_sqlite.py", daemon.port)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "B's write: applied" in r.stdout and "refused" in r.stdout.splitlines()[2]
    print(r.stdout)
