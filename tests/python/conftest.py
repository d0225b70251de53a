# SPDX-License-Identifier: MIT
"""Fixtures: a real dlockd (memory only, or on a real redis-server), the
client package from this checkout (client/python)."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, HERE)

from procs import Daemon, Redis  # noqa: E402


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    """dlockd --persist none."""
    d = Daemon("--persist", "none").start()
    yield d
    assert d.stop() == 0, d.read_log()[-2000:]
    d.cleanup()


@pytest.fixture
def redis() -> Iterator[Redis]:
    r = Redis("always")
    yield r
    r.cleanup()


@pytest.fixture
def rdaemon(redis: Redis) -> Iterator[Daemon]:
    """dlockd --persist redis on its own redis-server (appendfsync always)."""
    d = Daemon("--persist", "redis", "--redis", redis.url, "--log-level", "info").start()
    d.redis = redis  # type: ignore[attr-defined]
    yield d
    d.stop()
    d.cleanup()
