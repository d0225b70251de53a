# SPDX-License-Identifier: MIT
"""Request ids and news of waiters, against a real dlockd (and, for what
only a server could make happen on demand, the client's protocol state
machine fed by the test):

- a LOCK re-sent after a drop carries the acquire's request id (req=), so
  a grant whose reply the drop lost is given back to it (a TCP proxy
  between the client and the daemon discards the replies, then cuts);
  req= goes only to a server of 0.4.0 or later, the same number on every
  write of one acquire, another for the next;
- lock(notify_waiters=True): the server's "* WAITING" calls on_contended
  and sets lease.waiters, for a holder and for a waiter's grant (whose
  news comes before its confirmation is answered); a lease that did not
  ask hears nothing."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest

import dlockd
from procs import Daemon, free_port, wait_until


def client(d: Daemon, **kw: Any) -> dlockd.Client:
    return dlockd.Client(d.addr, **kw)


class Raw:
    """A connection of its own to the daemon, as another owner."""

    def __init__(self, port: int, owner: str) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.s.makefile("rb")
        assert self.call(f"HELLO owner={owner}").startswith("OK HELLO")

    def call(self, line: str) -> str:
        self.s.sendall(line.encode() + b"\r\n")
        return self.f.readline().decode().strip()

    def kv(self, line: str, key: str) -> str:
        for w in line.split():
            if w.startswith(key + "="):
                return w[len(key) + 1 :]
        raise AssertionError(f"no {key}= in {line!r}")

    def close(self) -> None:
        self.f.close()
        self.s.close()


class Proxy:
    """A TCP proxy from a port of its own to the daemon's. ``discard``:
    the daemon's bytes to the client are thrown away; ``cut()`` closes
    every connection it carries (the client reconnects through it)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.discard = False
        self.ls = socket.create_server(("127.0.0.1", self.port))
        self.ls.settimeout(0.1)
        self.mu = threading.Lock()
        self.socks: list[socket.socket] = []
        self.stopped = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                c.close()
                continue
            c.settimeout(None)
            u.settimeout(None)
            with self.mu:
                self.socks += [c, u]
            for src, dst, down in ((c, u, False), (u, c, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, down), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if down and self.discard:
                    continue  # lost on the way
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.mu:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def stop(self) -> None:
        self.stopped = True
        self.ls.close()
        self.cut()
        for t in self.threads:
            t.join(5)


# ---- request ids ---------------------------------------------------------------


def test_a_lock_whose_reply_a_drop_lost_gets_its_grant_back(daemon):
    """The LOCK is granted at the server, its reply lost on the way, then
    the connection drops: the client sends the LOCK again after the
    reconnect. With its request id the server answers with the grant it
    made (same token, holds=1): the acquire succeeds, and one release
    frees the lock. (Without it, the grant looked like another process's
    hold of the owner: HeldByOwner, and the lock stayed held until its
    TTL.)"""
    p = Proxy(daemon.port)
    raw = Raw(daemon.port, "other")
    c = dlockd.Client(f"127.0.0.1:{p.port}", owner="req-owner")
    try:
        p.discard = True
        box: list[Any] = [None, None]

        def job() -> None:
            try:
                box[0] = c.lock("rq", ttl=10, wait=8)
            except dlockd.DlockError as e:
                box[1] = e

        t = threading.Thread(target=job)
        t.start()
        # granted at the server, the reply lost on the way
        assert wait_until(lambda: "state=held" in raw.call("STATUS rq"), 2.5)
        p.discard = False
        p.cut()
        t.join(15)
        assert not t.is_alive()
        assert box[1] is None, f"lock: {box[1]!r}"
        lease = box[0]
        st = raw.call("STATUS rq")
        assert int(raw.kv(st, "token")) == lease.token, st
        assert raw.kv(st, "count") == "1", st
        lease.release()
        got = raw.call("TRYLOCK rq")
        assert got.startswith("OK GRANTED rq "), f"freed by one release: {got}"
    finally:
        c.close()
        raw.close()
        p.stop()


def _hello(core: Any, version: str) -> None:
    from dlockd import _core

    now = _core.now_ms()
    core.connecting()
    core.connected(now)
    assert core.data_received(
        f"OK HELLO version={version} owner=o key=0123456789abcdef0123456789abcdef"
        " user=default auth=none persist=none default_ttl_ms=30000"
        " max_ttl_ms=86400000 role=active\r\n".encode(),
        now,
    )


def _lock_line(core: Any) -> str:
    out = bytes(core.out).decode()
    core.out.clear()
    lines = [ln for ln in out.split("\r\n") if ln.startswith(("LOCK ", "TRYLOCK "))]
    assert len(lines) == 1, out
    return lines[0]


def _words(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


class _Hooks:
    def __init__(self) -> None:
        self.told: list[tuple[Any, int]] = []

    def done(self, q: Any) -> None:
        pass

    def lost(self, ls: Any) -> None:
        pass

    def at_risk(self, ls: Any) -> None:
        pass

    def contended(self, ls: Any) -> None:
        self.told.append((ls, ls.waiters))

    def turn(self, t: Any) -> None:
        pass

    def watch_event(self, w: Any) -> None:
        pass


def _new_core(hooks: _Hooks) -> Any:
    from dlockd import _core, _options

    return _core.Core(_options.build("127.0.0.1:1", {"describe": False}), hooks)


def test_the_request_id_is_sent_again_the_same_and_only_to_a_04_server():
    """One random id per acquire, never 0, the same on the LOCK sent again
    after a drop; decided per connection by its HELLO's version: a 0.3
    server refuses the option."""
    from dlockd import _core

    core = _new_core(_Hooks())
    _hello(core, "0.4.0")
    now = _core.now_ms()
    q = core.lock_request("x", 1000, 5000, False, 0, now)
    core.submit(q, now)
    first = _words(_lock_line(core))
    assert int(first["req"]) == q.reqid and 0 < q.reqid < 1 << 64
    assert "notify" not in first
    core.connection_lost(now)
    _hello(core, "0.4.0")
    again = _words(_lock_line(core))
    assert again["req"] == first["req"]  # the same acquire: the same id
    # a server of 0.3: no req= (it would refuse the LOCK)
    core.connection_lost(now)
    _hello(core, "0.3.9")
    assert "req" not in _words(_lock_line(core))
    # ... and back on a 0.4 one
    core.connection_lost(now)
    _hello(core, "1.0.0")
    assert _words(_lock_line(core))["req"] == first["req"]
    # another acquire: another id
    q2 = core.lock_request("y", 1000, 0, False, 0, now)
    core.submit(q2, now)
    line = _lock_line(core)
    assert line.startswith("TRYLOCK y ") and int(_words(line)["req"]) == q2.reqid
    assert q2.reqid != q.reqid


# ---- news of waiters ---------------------------------------------------------


class Told:
    """What on_contended said: (lease, waiters, lease.waiters then)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, int, int]] = []
        self.thread: list[str] = []

    def __call__(self, lease: Any, waiters: int) -> None:
        self.calls.append((lease, waiters, lease.waiters))
        self.thread.append(threading.current_thread().name)

    def of(self, lease: Any) -> list[int]:
        return [n for le, n, _ in self.calls if le is lease]


def test_a_holder_that_asked_is_told_when_others_wait(daemon):
    told = Told()
    w1, w2 = Raw(daemon.port, "w1"), Raw(daemon.port, "w2")
    try:
        with client(daemon, on_contended=told) as c, client(daemon, on_contended=told) as plain:
            lease = c.lock("cache", ttl=30, notify_waiters=True)
            assert lease.waiters == 0
            assert w1.call("LOCK cache") == "OK QUEUED cache 1"
            assert wait_until(lambda: told.of(lease) == [1], 5), told.calls
            assert lease.waiters == 1
            assert w2.call("LOCK cache") == "OK QUEUED cache 2"
            assert wait_until(lambda: told.of(lease) == [1, 2], 5), told.calls
            assert lease.waiters == 2
            # told on the client's thread, never with its lock held (the
            # lease could be read there: its count was already set)
            assert all(n == seen for _, n, seen in told.calls)
            assert set(told.thread) == {"dlockd-client"}
            # a lease that did not ask hears nothing
            p = plain.lock("plain", ttl=30)
            assert w1.call("LOCK plain") == "OK QUEUED plain 1"
            time.sleep(0.3)
            assert told.of(p) == [] and p.waiters == 0
            p.release()
            lease.release()
    finally:
        w1.close()
        w2.close()


def test_a_waiter_that_asked_is_told_of_those_behind_it_once_granted(daemon):
    """The server says "* WAITING" right after the waiter's "* GRANTED",
    before the reply to the client's confirmation: the count is kept
    with the confirmation and given to the lease when it is made."""
    told = Told()
    w0, w1 = Raw(daemon.port, "w0"), Raw(daemon.port, "w1")
    try:
        granted = w0.call("LOCK q ttl=10s")
        assert granted.startswith("OK GRANTED q "), granted
        token0 = granted.split()[3]
        with client(daemon, on_contended=told) as c:
            box: list[Any] = []
            t = threading.Thread(
                target=lambda: box.append(c.lock("q", ttl=10, wait=5, notify_waiters=True))
            )
            t.start()
            assert wait_until(lambda: c.status("q").waiters == 1, 2)
            assert w1.call("LOCK q wait=5s") == "OK QUEUED q 2"
            assert w0.call(f"UNLOCK q {token0}").startswith("OK RELEASED")
            t.join(5)
            lease = box[0]
            assert wait_until(lambda: told.of(lease) == [1], 2), told.calls
            assert lease.waiters == 1
            lease.release()
    finally:
        w0.close()
        w1.close()


def test_news_of_waiters_before_the_confirmation_is_kept_and_news_of_others_ignored():
    """The same, step by step in the client's state machine: "* WAITING"
    between "* GRANTED" and the confirmation's reply reaches the lease;
    one for a lease the client does not hold is nothing."""
    from dlockd import _core

    hooks = _Hooks()
    core = _new_core(hooks)
    _hello(core, "0.4.0")
    now = _core.now_ms()
    q = core.lock_request("x", 10000, 5000, False, 0, now)
    q.opts = {"notify_waiters": True}
    core.submit(q, now)
    line = _lock_line(core)
    assert "notify=waiters" in line.split()
    tag = q.tag
    assert core.data_received(f"OK QUEUED x 1 id={tag}\r\n".encode(), now)
    assert core.data_received(
        f"* GRANTED x 7 10000 holds=1 id={tag}\r\n* WAITING x 3 token=7 id={tag}\r\n"
        "* WAITING other 5 token=9\r\n* WAITING x 4 token=8\r\n".encode(),
        now,
    )
    assert q.op == "CONFIRM" and not q.done and hooks.told == []
    confirm = bytes(core.out).decode()
    core.out.clear()
    assert confirm.startswith("REFRESH x 7 "), confirm
    assert core.data_received(f"OK REFRESHED x 10000 id={q.tag}\r\n".encode(), now)
    assert q.done and q.error is None
    ls = q.result
    # no handle yet: the driver tells it when it makes one
    assert ls.waiters == 3 and ls.contended_due and hooks.told == []
    ls.handle = object()
    assert core.data_received(b"* WAITING x 6 token=7\r\n", now)
    assert hooks.told == [(ls, 6)] and ls.waiters == 6


@pytest.mark.asyncio
async def test_async_a_holder_that_asked_is_told_when_others_wait(daemon):
    loop = asyncio.get_running_loop()
    told = Told()
    w1 = Raw(daemon.port, "w1")
    try:
        async with dlockd.AsyncClient(daemon.addr, on_contended=told) as c:
            lease = await c.lock("acache", ttl=30, notify_waiters=True)
            assert lease.waiters == 0
            assert await loop.run_in_executor(None, w1.call, "LOCK acache") == (
                "OK QUEUED acache 1"
            )
            end = loop.time() + 5
            while told.of(lease) != [1] and loop.time() < end:
                await asyncio.sleep(0.01)
            assert told.of(lease) == [1] and lease.waiters == 1
            await lease.release()
    finally:
        w1.close()


@pytest.mark.asyncio
async def test_async_a_waiter_that_asked_is_told_of_those_behind_it_once_granted(daemon):
    loop = asyncio.get_running_loop()
    told = Told()
    w0, w1 = Raw(daemon.port, "w0"), Raw(daemon.port, "w1")
    try:
        granted = w0.call("LOCK aq ttl=10s")
        assert granted.startswith("OK GRANTED aq "), granted
        async with dlockd.AsyncClient(daemon.addr, on_contended=told) as c:
            waiter = asyncio.create_task(c.lock("aq", ttl=10, wait=5, notify_waiters=True))
            end = loop.time() + 2
            while (await c.status("aq")).waiters != 1 and loop.time() < end:
                await asyncio.sleep(0.01)
            assert await loop.run_in_executor(None, w1.call, "LOCK aq wait=5s") == (
                "OK QUEUED aq 2"
            )
            unlock = f"UNLOCK aq {granted.split()[3]}"
            assert (await loop.run_in_executor(None, w0.call, unlock)).startswith("OK RELEASED")
            lease = await asyncio.wait_for(waiter, 5)
            end = loop.time() + 2
            while told.of(lease) != [1] and loop.time() < end:
                await asyncio.sleep(0.01)
            assert told.of(lease) == [1] and lease.waiters == 1
            await lease.release()
    finally:
        w0.close()
        w1.close()


def test_notify_waiters_is_a_bool():
    with pytest.raises(TypeError):
        dlockd._api.lock_args(
            "x", None, None, "exclusive", None, dlockd._api._UNSET, dlockd._api._UNSET,
            None, None, notify_waiters="yes",  # type: ignore[arg-type]
        )
