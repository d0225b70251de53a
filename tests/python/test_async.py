# SPDX-License-Identifier: MIT
"""dlockd.AsyncClient against a real dlockd: the same core as Client,
driven by the event loop; task cancellation while acquiring and
releasing, cancel_on_loss, renewal and loss."""

from __future__ import annotations

import asyncio
import signal

import pytest

import dlockd
from dlockd import LostReason
from procs import boottime

pytestmark = pytest.mark.asyncio


async def aclient(d, **kw) -> dlockd.AsyncClient:
    return await dlockd.AsyncClient(d.addr, **kw).connect()


async def wait_for(pred, timeout: float) -> bool:
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        if await pred():
            return True
        await asyncio.sleep(0.01)
    return False


async def test_async_lock_release_and_async_with(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
        lease = await c.lock("a", ttl=5)
        assert lease.valid and 4 < await lease.check() <= 5
        with pytest.raises(dlockd.LockTimeout):
            await o.lock("a", wait=0)
        await lease.release()
        async with o.lock("a", ttl=5, wait=0) as l2:
            assert l2.token > lease.token
            assert (await c.status("a")).owner == o.owner
        assert (await c.status("a")).held is False


async def test_async_waiter_is_granted_on_release(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
        held = await c.lock("w", ttl=5)
        waiter = asyncio.create_task(o.lock("w", ttl=5, wait=5))
        assert await wait_for(lambda: _waiters(c, "w", 1), 2)
        await held.release()
        got = await asyncio.wait_for(waiter, 5)
        assert got.token > held.token
        await got.release()


async def _waiters(c, name, n):
    return (await c.status(name)).waiters == n


async def test_a_cancelled_acquisition_leaves_the_queue(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
        held = await c.lock("q", ttl=5)
        waiter = asyncio.create_task(o.lock("q", ttl=5, wait=None))
        assert await wait_for(lambda: _waiters(c, "q", 1), 2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await wait_for(lambda: _waiters(c, "q", 0), 2)
        await held.release()
        # nobody holds it: the cancelled wait was not granted behind our back
        assert (await c.status("q")).held is False
        async with o.lock("q", ttl=1, wait=0):
            pass


async def test_a_release_interrupted_by_cancellation_still_releases(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
        lease = await c.lock("r", ttl=30)
        daemon.signal(signal.SIGSTOP)
        try:
            t = asyncio.create_task(lease.release())
            await asyncio.sleep(0.1)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
        finally:
            daemon.signal(signal.SIGCONT)
        assert await wait_for(lambda: _free(o, "r"), 3)


async def _free(c, name):
    return (await c.status(name)).held is False


async def test_cancel_on_loss_cancels_the_block_and_ends_it_with_lock_lost(daemon):
    async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as op:
        reached_end = False
        with pytest.raises(dlockd.LockLost):
            async with c.lock("x", ttl=10, cancel_on_loss=True) as lease:
                await op.break_lease("x", lease.token, reason="test")
                await asyncio.sleep(5)  # cancelled here
                reached_end = True
        assert not reached_end and lease.reason is LostReason.EXPIRED
        # the task itself is not left cancelled: it goes on
        await asyncio.sleep(0.01)
        assert not asyncio.current_task().cancelling()


async def test_async_renewal_and_loss_before_the_deadline_when_the_server_freezes(daemon):
    seen = []
    async with dlockd.AsyncClient(daemon.addr, on_lost=lambda l, why: seen.append(
            (why, boottime(), l.deadline))) as c:
        lease = await c.lock("z", ttl=0.6)
        await asyncio.sleep(1.2)
        assert lease.valid and not seen
        daemon.signal(signal.SIGSTOP)
        try:
            await asyncio.wait_for(lease.lost.wait(), 2)
        finally:
            daemon.signal(signal.SIGCONT)
        await asyncio.sleep(0.01)
        why, at, deadline = seen[0]
        assert why is LostReason.UNCONFIRMED and at < deadline


async def test_async_lease_survives_kill9_and_restart(rdaemon):
    async with dlockd.AsyncClient(rdaemon.addr) as c:
        lease = await c.lock("k", ttl=3)
        rdaemon.kill9()
        rdaemon.restart()
        await asyncio.sleep(1.5)
        assert lease.valid
        assert (await c.status("k")).token == lease.token
        await lease.release()


async def test_async_a_hung_first_server_leaves_time_for_the_next(daemon):
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        servers = f"127.0.0.1:{hung.getsockname()[1]},{daemon.addr}"
        c = await dlockd.AsyncClient(servers, connect_timeout=3.0).connect()
        await c.ping()
        await c.close()
    finally:
        hung.close()


async def test_async_a_busy_lock_names_its_holder_also_after_a_restart(rdaemon):
    async with dlockd.AsyncClient(
        rdaemon.addr, owner="deploy-7", desc_host="web3", desc_pid=4242, desc_cmd="make deploy"
    ) as a, dlockd.AsyncClient(rdaemon.addr, describe=False) as b:
        lease = await a.lock("d", ttl=10)
        rdaemon.kill9()
        rdaemon.restart()
        with pytest.raises(dlockd.LockTimeout) as e:
            await b.lock("d", wait=0)
        h = e.value.holder
        assert h is not None and h.owner == "deploy-7"
        assert (h.host, h.pid, h.cmd) == ("web3", 4242, "make deploy")
        st = await b.status("d")
        assert (st.host, st.pid, st.cmd) == ("web3", 4242, "make deploy")
        await lease.release()


async def test_async_an_election_is_held_followed_and_handed_over(daemon):
    async with dlockd.AsyncClient(daemon.addr, owner="cand-a") as a, \
            dlockd.AsyncClient(daemon.addr, owner="cand-b") as b, \
            dlockd.AsyncClient(daemon.addr) as obs:
        lead = await a.lock("elect", ttl=10, value="host-a:7000")
        second = asyncio.create_task(b.lock("elect", ttl=10, value="host-b:7002"))
        assert await wait_for(lambda: _waiters(obs, "elect", 1), 2)
        st = await obs.status("elect")
        assert (st.owner, st.token, st.value) == ("cand-a", lead.token, "host-a:7000")
        async with obs.watch("elect") as w:
            await lead.proclaim("host-a:7001 primary")
            assert lead.value == "host-a:7001 primary"
            ev = await w.get(2)
            assert ev is not None
            assert (ev.what, ev.token, ev.value) == ("value", lead.token, "host-a:7001 primary")
            with pytest.raises(ValueError):
                await lead.proclaim("")
            await lead.release()  # resign
            ev = await w.get(2)
            assert ev is not None and (ev.what, ev.token) == ("released", lead.token)
            nxt = await asyncio.wait_for(second, 5)
            ev = await w.get(2)
            assert ev is not None
            assert (ev.what, ev.owner, ev.token, ev.value) == (
                "granted", "cand-b", nxt.token, "host-b:7002")
            assert nxt.token > lead.token
        assert (await obs.status("elect")).value == "host-b:7002"
        with pytest.raises(dlockd.LockLost):
            await lead.proclaim("too late")
        await nxt.release()
