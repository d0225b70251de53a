# SPDX-License-Identifier: MIT
"""What a newcomer's trial of the Python client asked for, against a real
dlockd: watches as iterators, an AsyncClient that connects on first use,
losses that are loud (a log line, LockLost, an async block cancelled) and
that say "broken by" for a BREAK, close() giving back the leases,
timedelta durations, redis-py's habits, and a refused connect that fails
at once. Timing assertions are promises of the features (a bound the
feature sets), with margins for a busy machine."""

from __future__ import annotations

import asyncio
import datetime
import logging
import signal
import socket
import threading
import time

import pytest

import dlockd
from dlockd import LostReason
from procs import Daemon, free_port, wait_until


def client(d: Daemon, **kw) -> dlockd.Client:
    return dlockd.Client(d.addr, **kw)


def _watches(c: dlockd.Client) -> int:
    return int(c.stats().get("watches", "0"))


class Logged(logging.Handler):
    """The "dlockd" logger's records, with an event per record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.ev = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.ev.set()

    def __enter__(self) -> Logged:
        logging.getLogger("dlockd").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("dlockd").removeHandler(self)


# ---- 1. watch as an iterator -------------------------------------------------


def test_watch_is_a_blocking_iterator_of_events_and_break_ends_it(daemon):
    with client(daemon) as c, client(daemon) as o:
        w = c.watch("jobs/*")  # answered: watched from here on
        guard = threading.Timer(10, w.close)  # a broken feature fails, not hangs
        guard.start()
        try:
            lease = o.lock("jobs/1", ttl=10)
            lease.release()
            b = o.lock("jobs/2", ttl=10)
            c.break_lease("jobs/2", b.token, reason="test")
            o.lock("other", ttl=10).release()  # not watched
            got = []
            for ev in w:
                got.append(ev)
                if len(got) == 4:
                    break
        finally:
            guard.cancel()
        assert [(e.name, e.what) for e in got] == [
            ("jobs/1", "granted"),
            ("jobs/1", "released"),
            ("jobs/2", "granted"),
            ("jobs/2", "broken"),
        ]
        assert got[0].owner == o.owner and got[0].token == lease.token
        assert (got[0].holders, got[1].holders) == (1, 0)
        assert got[3].broken_by == "default" and got[3].token == b.token
        # leaving the loop closed the watch, and the server forgot it
        assert w.closed
        assert wait_until(lambda: _watches(c) == 0, 3)


def test_a_watch_iteration_ends_when_the_client_closes(daemon):
    c = client(daemon)
    w = c.watch("x", "y/*")
    seen: list[dlockd.WatchEvent] = []
    t = threading.Thread(target=lambda: seen.extend(w))
    t.start()
    with client(daemon) as o:
        o.lock("y/1", ttl=5).release()
        assert wait_until(lambda: len(seen) == 2, 5)
    c.close()
    t.join(5)
    assert not t.is_alive() and w.closed
    assert [e.what for e in seen] == ["granted", "released"]


def test_a_watch_get_waits_at_most_its_timeout(daemon):
    with client(daemon) as c:
        with c.watch("quiet") as w:
            t0 = time.monotonic()
            assert w.get(timeout=datetime.timedelta(milliseconds=200)) is None
            assert time.monotonic() - t0 >= 0.19
        assert w.closed and w.get(0) is None


def test_a_watch_is_made_again_after_a_restart(rdaemon):
    with client(rdaemon) as c, client(rdaemon) as o:
        w = c.watch("r/*")
        rdaemon.kill9()
        rdaemon.restart()
        ev = w.get(timeout=10)
        assert ev is not None and (ev.name, ev.what, ev.holders) == ("r/*", "resumed", -1)
        o.lock("r/1", ttl=5).release()
        assert [w.get(5).what, w.get(5).what] == ["granted", "released"]
        w.close()


def test_a_watch_the_user_may_not_read_is_denied():
    secret = "app-secret-8d2e4f6a1b3c5d7e"
    h = "sha256:541ec7c9d1036f5553195d86ce23d116235e3910d32d2b913b4698297e5f8ec4"
    d = Daemon("--persist", "none")
    users = d.file("users", f"app {h} lock=app/ read=app/\n")
    d.conf = d.file("dlockd.conf", f"[server]\nusers_file = {users}\n")
    d.start()
    try:
        with dlockd.Client(d.addr, user="app", secret=secret) as c:
            with pytest.raises(dlockd.Denied):
                c.watch("app/*", "other/*")
            with c.watch("app/*") as w:
                c.lock("app/1", ttl=5).release()
                assert [w.get(5).what, w.get(5).what] == ["granted", "released"]
    finally:
        d.cleanup()


@pytest.mark.asyncio
async def test_async_for_over_a_watch(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
        got: list[dlockd.WatchEvent] = []

        async def read() -> None:
            async for ev in c.watch("jobs/*"):
                got.append(ev)
                if len(got) == 2:
                    break

        reader = asyncio.create_task(read())
        end = asyncio.get_running_loop().time() + 5
        while (await c.stats()).get("watches") != "1":
            assert asyncio.get_running_loop().time() < end
            await asyncio.sleep(0.01)
        lease = await o.lock("jobs/9", ttl=5)
        await lease.release()
        await asyncio.wait_for(reader, 5)
        assert [(e.name, e.what, e.token) for e in got] == [
            ("jobs/9", "granted", lease.token),
            ("jobs/9", "released", lease.token),
        ]
        # an awaited watch is answered first, and ends with the client
        w = await c.watch("a")
        await (await o.lock("a", ttl=5)).release()
        assert (await w.get(5)).what == "granted"
    assert (await w.get(1)).what == "released" and await w.get(1) is None


# ---- 2. AsyncClient connects on first use -------------------------------------


@pytest.mark.asyncio
async def test_an_async_client_connects_on_first_use(daemon):
    c = dlockd.AsyncClient(daemon.addr)
    try:
        # concurrent first uses share one connection
        lease, st = await asyncio.gather(c.lock("a", ttl=5), c.status("b"))
        assert lease.valid and st.held is False
        assert (await c.status("a")).owner == c.owner
    finally:
        await c.close()
    # connect() and async with still work, and a closed client says so
    with pytest.raises(dlockd.ConnectionLost):
        await c.ping()
    async with dlockd.AsyncClient(daemon.addr) as c2:
        await c2.ping()
    c3 = await dlockd.AsyncClient(daemon.addr).connect()
    await c3.ping()
    await c3.close()


@pytest.mark.asyncio
async def test_a_failed_first_use_can_be_tried_again():
    port = free_port()
    c = dlockd.AsyncClient(f"127.0.0.1:{port}")
    with pytest.raises(dlockd.Unavailable):
        await c.ping()
    d = Daemon("--persist", "none", port=port).start()
    try:
        await c.ping()  # the next use connects
        await c.close()
    finally:
        d.stop()
        d.cleanup()


# ---- 3 and 5. a loss is loud, and a break says so -----------------------------


def test_a_loss_is_logged_at_once_and_the_with_block_ends_with_a_break(daemon):
    with Logged() as log, client(daemon) as c, client(daemon) as op:
        with pytest.raises(dlockd.LockLost) as e:
            with c.lock("w", ttl=10) as lease:
                op.break_lease("w", lease.token, reason="test")
                assert lease.lost.wait(5)
                assert log.ev.wait(5)  # while the block still runs
                assert not lease.valid
        rec = log.records[0]
        assert rec.levelno == logging.WARNING and rec.name == "dlockd"
        msg = rec.getMessage()
        assert "'w'" in msg and str(lease.token) in msg and "broken by default" in msg
        assert "broken by default" in str(e.value) and "EXPIRED" not in str(e.value)
        assert e.value.broken_by == "default" and e.value.reason is LostReason.EXPIRED
        assert e.value.token == lease.token and lease.broken


def test_an_expiry_is_logged_as_one(daemon):
    with Logged() as log, client(daemon, renew=False) as c:
        lease = c.lock("e", ttl=0.3)
        assert lease.lost.wait(5) and log.ev.wait(5)
        assert "broken" not in log.records[0].getMessage() and not lease.broken


@pytest.mark.asyncio
async def test_an_async_with_block_is_cancelled_at_the_loss_by_default(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as op:
        reached_end = False
        t0 = time.monotonic()
        with pytest.raises(dlockd.LockLost) as e:
            async with c.lock("x", ttl=10) as lease:
                await op.break_lease("x", lease.token, reason="test")
                await asyncio.sleep(10)  # cancelled here
                reached_end = True
        assert not reached_end and time.monotonic() - t0 < 5
        assert "broken by default" in str(e.value)
        assert not asyncio.current_task().cancelling()
        # a plain await is not cancelled (its lease outlives any block)
        lease = await c.lock("y", ttl=10)
        await op.break_lease("y", lease.token, reason="test")
        await asyncio.wait_for(lease.lost.wait(), 5)
        await asyncio.sleep(0)
        assert lease.broken and not asyncio.current_task().cancelling()
        # and cancel_on_loss=False keeps the block running
        with pytest.raises(dlockd.LockLost):
            async with c.lock("z", ttl=10, cancel_on_loss=False) as lz:
                await op.break_lease("z", lz.token, reason="test")
                await asyncio.wait_for(lz.lost.wait(), 5)
                await asyncio.sleep(0.05)
                reached_end = True
        assert reached_end


# ---- 4. close() gives back the leases ------------------------------------------


def test_close_gives_back_the_leases_still_held(daemon):
    with client(daemon) as o:
        c = client(daemon)
        a = c.lock("a", ttl=30)
        c.lock("b", ttl=30, mode="shared")
        c.close()
        assert o.status("a").held is False and o.status("b").held is False
        assert a.reason is LostReason.CLOSED and a.lost.is_set()
        with client(daemon) as c2:
            c2.lock("c", ttl=30)
        assert o.status("c").held is False
        # release=False keeps them until their TTL
        c3 = client(daemon)
        kept = c3.lock("d", ttl=30)
        c3.close(release=False)
        assert o.status("d").token == kept.token


def test_close_does_not_hang_on_a_server_that_does_not_answer(daemon):
    c = client(daemon)
    c.lock("s", ttl=30)
    daemon.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        c.close()
        # the UNLOCK's wait is bounded by a second (the promise), not
        # request_timeout (5 s)
        assert time.monotonic() - t0 < 2.5
    finally:
        daemon.signal(signal.SIGCONT)


def test_a_with_block_open_when_its_client_closes_ends_with_lock_lost(daemon):
    with client(daemon) as o:
        c = client(daemon)
        with pytest.raises(dlockd.LockLost) as e:
            with c.lock("wc", ttl=30):
                c.close()
        assert e.value.reason is LostReason.CLOSED and "closed" in str(e.value)
        assert o.status("wc").held is False


@pytest.mark.asyncio
async def test_async_close_gives_back_the_leases_unless_told_not_to(daemon):
    async with dlockd.AsyncClient(daemon.addr) as o:
        async with dlockd.AsyncClient(daemon.addr) as c:
            await c.lock("a", ttl=30)
        assert (await o.status("a")).held is False
        c = dlockd.AsyncClient(daemon.addr)
        kept = await c.lock("k", ttl=30)
        await c.close(release=False)
        assert (await o.status("k")).token == kept.token


# ---- 6. timedelta durations ------------------------------------------------------


def test_durations_may_be_timedeltas(daemon):
    td = datetime.timedelta
    with client(daemon, connect_timeout=td(seconds=2), request_timeout=td(seconds=5)) as c:
        with c.lock("t", ttl=td(seconds=5), wait=td(0), max_hold=td(minutes=1)) as lease:
            assert 4 < lease.check() <= 5
            assert 2 < lease.refresh(td(seconds=3)) <= 3
            assert 2 < lease.check() <= 3
        with client(daemon) as o, o.lock("t", ttl=5):
            t0 = time.monotonic()
            with pytest.raises(dlockd.LockTimeout):
                c.lock("t", wait=td(milliseconds=300))
            assert time.monotonic() - t0 >= 0.29


@pytest.mark.asyncio
async def test_async_durations_may_be_timedeltas(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c:
        async with c.lock("t", ttl=datetime.timedelta(seconds=5)) as lease:
            assert 4 < await lease.check() <= 5


# ---- 7. redis-py's habits ------------------------------------------------------------


def test_redis_py_blocking_arguments_map_to_wait(daemon):
    with client(daemon) as c, client(daemon) as o:
        with c.lock("h", blocking_timeout=5) as lease:
            t0 = time.monotonic()
            with pytest.raises(dlockd.LockTimeout):
                o.lock("h", blocking=False)
            with pytest.raises(dlockd.LockTimeout):
                o.lock("h", blocking_timeout=0.3)
            assert time.monotonic() - t0 >= 0.29
            assert lease.locked() and lease.valid and lease.owned
        assert not lease.valid and not lease.locked()
        with pytest.raises(TypeError, match="ttl="):
            c.lock("h", timeout=10)
        with pytest.raises(TypeError, match="not both"):
            c.lock("h", wait=1, blocking=False)


def test_redis_py_acquire_and_extend(daemon):
    with client(daemon) as c:
        lease = c.lock("e", ttl=5)
        with pytest.raises(TypeError, match=r"wait=0"):
            lease.acquire(blocking=False)
        left = lease.remaining()
        granted = lease.extend(5)
        assert left + 4 < granted <= left + 5.01
        assert left + 4 < lease.check() <= left + 5.01
        assert 1.9 < lease.extend(2, replace_ttl=True) <= 2
        lease.release()


@pytest.mark.asyncio
async def test_async_redis_py_habits(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c:
        lease = await c.lock("e", ttl=5, blocking=False)
        assert lease.valid and await lease.locked() and lease.owned
        assert 9 < await lease.extend(5) <= 10.01
        await lease.release()
        assert not lease.valid and not await lease.locked()


# ---- 8. a refused connect fails at once -----------------------------------------------


def test_a_refused_port_fails_at_once(daemon):
    port, other = free_port(), free_port()
    for servers in (f"127.0.0.1:{port}", f"127.0.0.1:{port},127.0.0.1:{other}"):
        t0 = time.monotonic()
        with pytest.raises(dlockd.Unavailable, match="refused"):
            dlockd.Client(servers, connect_timeout=5)
        # the promise: well under connect_timeout, not a machine speed
        assert time.monotonic() - t0 < 1.0
    # a refused server before a live one is only passed over
    with dlockd.Client(f"127.0.0.1:{port},{daemon.addr}", connect_timeout=5) as c:
        c.ping()


def test_a_server_slow_to_answer_still_gets_the_connect_timeout():
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        t0 = time.monotonic()
        with pytest.raises(dlockd.Unavailable):
            dlockd.Client(f"127.0.0.1:{hung.getsockname()[1]}", connect_timeout=0.5)
        assert time.monotonic() - t0 >= 0.45
    finally:
        hung.close()


@pytest.mark.asyncio
async def test_async_a_refused_port_fails_at_once():
    t0 = time.monotonic()
    with pytest.raises(dlockd.Unavailable):
        await dlockd.AsyncClient(f"127.0.0.1:{free_port()}", connect_timeout=5).connect()
    assert time.monotonic() - t0 < 1.0
