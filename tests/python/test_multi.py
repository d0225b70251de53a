# SPDX-License-Identifier: MIT
"""Several locks at once (``lock_all``, ``LOCK a b ...``): the protocol
state machine fed a server's lines (no server), then Client and
AsyncClient against a real dlockd."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

import dlockd
from dlockd import _core
from procs import Daemon, wait_until
from test_client import _core_up, client


def _sent(core) -> list[str]:
    lines = bytes(core.out).decode().splitlines()
    core.out.clear()
    return lines


def _multi(core, names, ttl=1000, wait=0, now=None):
    now = _core.now_ms() if now is None else now
    q = core.lockall_request(sorted(names), ttl, wait, now)
    q.opts = {}
    core.submit(q, now)
    return q


def _block(head: str, tag: str, grants: list[tuple[str, int, int]]) -> bytes:
    lines = [f"{head} {len(grants)} id={tag}"]
    lines += [f"granted {n} {t} {ms} holds=1" for n, t, ms in grants]
    return ("\r\n".join(lines) + "\r\n").encode()


# ---- the state machine -------------------------------------------------------


def test_a_multi_lock_names_every_lock_in_one_request_in_byte_order():
    core, hooks, now = _core_up()
    q = _multi(core, ["b", "a", "B"], ttl=1000, wait=0)
    (line,) = _sent(core)
    assert re.fullmatch(rf"TRYLOCK B a b ttl=1000 req=\d+ id={q.tag}", line)
    q = _multi(core, ["x", "y"], ttl=2000, wait=-1)
    assert core.multi is not None  # the first is still in progress: held back
    assert _sent(core) == []


def test_an_ok_locked_block_makes_one_lease_per_name_counted_from_the_request():
    core, hooks, now = _core_up()
    q = _multi(core, ["y", "x"], ttl=1000, wait=5000, now=now)
    _sent(core)
    data = _block("OK LOCKED x", q.tag, [("x", 11, 1000), ("y", 12, 1000)])
    assert core.data_received(data, now)
    assert q.done and q.error is None
    lss = q.result
    assert [(ls.name, ls.token) for ls in lss] == [("x", 11), ("y", 12)]
    for ls in lss:
        assert ls.deadline == now + 1000 - _core.slack_ms(1000)
        assert ls in core.leases and ls.mode == "exclusive"
    assert core.multi is None


def test_a_grant_after_the_wait_is_confirmed_by_the_same_request_id():
    """* LOCKED comes some time after the grants: the client sends the
    request again with its id, and counts the leases from that write."""
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], ttl=3000, wait=-1, now=now)
    (first,) = _sent(core)
    req = re.search(r" req=(\d+)", first).group(1)
    assert core.data_received(f"OK QUEUED a 1 at=a id={q.tag}\r\n".encode(), now)
    later = now + 2000
    assert core.data_received(_block("* LOCKED a", q.tag, [("a", 5, 3000), ("b", 6, 3000)]), later)
    assert not q.done
    (again,) = _sent(core)
    assert again.startswith("LOCK a b ttl=3000 wait=inf") and f" req={req} " in again
    sent_at = q.sent_at
    assert core.data_received(_block("OK LOCKED a", q.tag, [("a", 5, 3000), ("b", 6, 3000)]), now)
    assert q.done and q.error is None
    assert [ls.token for ls in q.result] == [5, 6]
    assert all(ls.deadline == sent_at + 3000 - _core.slack_ms(3000) for ls in q.result)


@pytest.mark.parametrize(
    "line,cls,code",
    [
        ("* FAILED a DEADLOCK c 2 bob b", dlockd.Deadlock, "DEADLOCK"),
        ("* FAILED a UNAVAILABLE persistence went down", dlockd.Unavailable, "UNAVAILABLE"),
        ("* FAILED a EXPIRED b", dlockd.LockTimeout, "EXPIRED"),
        ("* TIMEOUT a", dlockd.LockTimeout, ""),
    ],
)
def test_a_wait_that_ends_without_the_locks_raises_what_a_single_lock_would(line, cls, code):
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b", "c"], wait=5000, now=now)
    _sent(core)
    data = f"OK QUEUED a 1 at=b id={q.tag}\r\n{line} id={q.tag}\r\n"
    assert core.data_received(data.encode(), now)
    assert type(q.error) is cls and q.error.code == code
    if cls is dlockd.Deadlock:
        assert q.error.owners == 2 and q.error.cycle == (("bob", "b"),)
    assert not core.leases and core.multi is None


@pytest.mark.parametrize(
    "line,cls,code",
    [
        ("NO BUSY b 2900 owner=alice held_ms=100", dlockd.LockTimeout, "BUSY"),
        ("NO ALREADY_HELD b 77", dlockd.HeldByOwner, "ALREADY_HELD"),
        ("NO DEADLOCK b 2 alice c", dlockd.Deadlock, "DEADLOCK"),
        ("NO LIMIT_MISMATCH b 3", dlockd.LimitMismatch, "LIMIT_MISMATCH"),
        ("ERR LIMIT one multi-lock at a time per connection", dlockd.LimitReached, "LIMIT"),
    ],
)
def test_a_refusal_at_once_raises_what_a_single_lock_would(line, cls, code):
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], wait=0, now=now)
    _sent(core)
    assert core.data_received(f"{line} id={q.tag}\r\n".encode(), now)
    assert type(q.error) is cls and q.error.code == code
    if code == "BUSY":
        assert q.error.holder is not None and q.error.holder.owner == "alice"


def test_a_multi_lock_given_up_while_it_waits_cancels_and_gives_back_a_crossing_grant():
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], wait=-1, now=now)
    _sent(core)
    assert core.data_received(f"OK QUEUED a 1 at=b id={q.tag}\r\n".encode(), now)
    core.abandon(q)
    (cancel,) = _sent(core)
    assert cancel.startswith("CANCEL a ")
    assert core.multi is None
    data = _block("* LOCKED a", q.tag, [("a", 5, 1000), ("b", 6, 1000)])
    assert core.data_received(data, now)
    sent = _sent(core)
    assert [w.split()[:3] for w in sent] == [["UNLOCK", "a", "5"], ["UNLOCK", "b", "6"]]
    assert not core.leases


@pytest.mark.parametrize(
    "grants",
    [
        [("a", 5, 1000), ("c", 6, 1000)],  # another lock
        [("b", 5, 1000), ("a", 6, 1000)],  # not in byte order
        [("a", 5, 1000), ("b", 6, 60000)],  # longer than asked
        [("a", 5, 1000), ("b", 0, 1000)],  # token 0
    ],
)
def test_a_block_no_server_may_send_drops_it_and_gives_back_what_it_named(grants):
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], wait=0, now=now)
    _sent(core)
    assert core.data_received(_block("OK LOCKED a", q.tag, grants), now) is False
    assert isinstance(q.error, dlockd.ProtocolError)
    assert not [ls for ls in core.leases if ls.live()]
    unlocked = {tuple(w.split()[1:3]) for w in _sent(core) if w.startswith("UNLOCK")}
    assert {(n, str(t)) for n, t, _ in grants if t} == unlocked


def test_a_reentering_grant_is_not_believed():
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], wait=0, now=now)
    _sent(core)
    data = f"OK LOCKED a 2 id={q.tag}\r\ngranted a 5 1000 holds=2\r\ngranted b 6 1000 holds=1\r\n"
    assert core.data_received(data.encode(), now) is False
    assert isinstance(q.error, dlockd.ProtocolError)


def test_multi_locks_go_one_at_a_time_and_a_held_back_one_gets_its_turn():
    core, hooks, now = _core_up()
    q1 = _multi(core, ["a", "b"], wait=5000, now=now)
    q2 = _multi(core, ["c", "d"], wait=5000, now=now)
    assert [w.split()[:3] for w in _sent(core)] == [["LOCK", "a", "b"]]
    assert q2.where == _core.HELD_BACK and q2.deadline > now + 5000
    assert core.data_received(f"OK QUEUED a 1 at=a id={q1.tag}\r\n".encode(), now)
    assert core.data_received(f"* TIMEOUT a id={q1.tag}\r\n".encode(), now)
    assert isinstance(q1.error, dlockd.LockTimeout)
    (line,) = _sent(core)
    assert line.startswith("LOCK c d ttl=1000 wait=") and core.multi is q2
    # a held-back one given up leaves the line
    q3 = _multi(core, ["e", "f"], wait=5000, now=now)
    core.abandon(q3)
    assert q3.done and q3 not in core.multi_queue
    # one whose wait runs out while held back ends then (a try: after
    # request_timeout)
    q4 = _multi(core, ["g", "h"], wait=200, now=now)
    q5 = _multi(core, ["i", "j"], wait=0, now=now)
    assert core.tick(now + 100) <= now + 200 and not q4.done
    core.tick(now + 200)
    assert isinstance(q4.error, dlockd.LockTimeout) and not q5.done
    core.tick(now + core.o.request_timeout_ms)
    assert isinstance(q5.error, dlockd.LockTimeout) and not core.multi_queue
    assert _sent(core) == []


def test_a_dropped_connection_sends_the_multi_lock_again_with_its_id():
    core, hooks, now = _core_up()
    q = _multi(core, ["a", "b"], wait=-1, now=now)
    (first,) = _sent(core)
    assert core.data_received(f"OK QUEUED a 1 at=b id={q.tag}\r\n".encode(), now)
    core.connection_lost(now)
    core.connecting()
    core.connected(now)
    assert core.data_received(
        b"OK HELLO version=0.4.0 owner=o role=active default_ttl_ms=30000\r\n", now
    )
    again = [w for w in _sent(core) if w.startswith("LOCK ")]
    req = re.search(r" req=\d+", first).group(0)
    assert len(again) == 1 and req in again[0]


@pytest.mark.parametrize(
    "names,err",
    [
        ("ab", TypeError),
        ([], ValueError),
        (["a", "b", "a"], ValueError),
        ([f"n{i}" for i in range(65)], ValueError),
        (["x" * 250 + str(i) for i in range(4)], ValueError),  # past 1024 bytes
        (["a b", "c"], ValueError),
    ],
)
def test_bad_names_are_refused_before_anything_is_sent(names, err):
    with pytest.raises(err):
        dlockd._api.lock_all_args(names, None, None, dlockd._api._UNSET, dlockd._api._UNSET,
                                  None, None)


# ---- against dlockd ----------------------------------------------------------


def test_lock_all_grants_every_lock_and_with_releases_them_all(daemon: Daemon):
    with client(daemon) as c, client(daemon) as other:
        with c.lock_all(["b", "a", "c"], ttl=5, wait=0) as leases:
            assert isinstance(leases, dlockd.Leases)
            assert leases.names == ["a", "b", "c"] and len(leases) == 3
            assert leases["b"] is leases[1] and leases.valid
            assert len(set(leases.tokens)) == 3
            for lease in leases:
                assert c.status(lease.name).token == lease.token
            with pytest.raises(dlockd.LockTimeout):
                other.lock("b", wait=0)
        assert not any(c.status(n).held for n in "abc")


def test_lock_all_is_all_or_none(daemon: Daemon):
    with client(daemon) as c, client(daemon) as other:
        held = other.lock("y", ttl=5)
        with pytest.raises(dlockd.LockTimeout) as e:
            c.lock_all(["x", "y", "z"], ttl=5, wait=0)
        assert e.value.code == "BUSY"
        t0 = time.monotonic()
        with pytest.raises(dlockd.LockTimeout):
            c.lock_all(["x", "y"], ttl=5, wait=0.3)
        assert 0.25 < time.monotonic() - t0 < 2.0
        assert not c.status("x").held and not c.status("z").held
        got: list[dlockd.Leases] = []
        t = threading.Thread(target=lambda: got.append(c.lock_all(["x", "y"], ttl=5, wait=5)))
        t.start()
        assert wait_until(lambda: other.status("y").waiters == 1, 2)
        assert other.status("x").held  # taken while it waits for y
        held.release()
        t.join(5)
        assert got and got[0].valid and got[0][1].token > held.token
        got[0].release()
        assert not c.status("x").held and not c.status("y").held


def test_the_leases_of_a_multi_lock_are_renewed_past_their_ttl(daemon: Daemon):
    with client(daemon) as c:
        leases = c.lock_all(["r1", "r2"], ttl=0.3, wait=0)
        time.sleep(1.0)
        assert leases.valid
        for lease in leases:
            assert lease.check() > 0
        leases[0].release()  # one by one, as any lease
        assert leases[1].valid and not leases[0].valid
        leases[1].release()


def test_a_name_this_client_holds_is_held_by_owner_whatever_the_wait(daemon: Daemon):
    with client(daemon) as c:
        with c.lock("x", ttl=5):
            t0 = time.monotonic()
            with pytest.raises(dlockd.HeldByOwner) as e:
                c.lock_all(["x", "y"], ttl=5, wait=2)
            assert e.value.code == "ALREADY_HELD" and time.monotonic() - t0 < 1
            assert not c.status("y").held


def test_another_process_of_the_owner_holding_a_name_is_held_by_owner(daemon: Daemon):
    with client(daemon) as c1:
        with client(daemon, owner=c1.owner, owner_key=c1.owner_key) as c2:
            with c1.lock("x", ttl=5):
                with pytest.raises(dlockd.HeldByOwner) as e:
                    c2.lock_all(["x", "y"], ttl=5, wait=1)
                assert e.value.code == "ALREADY_HELD" and "NO ALREADY_HELD x" in e.value.text


def test_threads_of_one_client_take_multi_locks_one_at_a_time(daemon: Daemon):
    """A server takes one multi-lock at a time per connection: the
    client holds the others back instead of an ERR LIMIT."""
    with client(daemon) as c, client(daemon) as other:
        held = other.lock("p", ttl=5)
        out: list[object] = []

        def take(names: list[str]) -> None:
            try:
                with c.lock_all(names, ttl=5, wait=5) as leases:
                    out.append(leases.names)
            except dlockd.DlockError as e:
                out.append(e)

        ts = [threading.Thread(target=take, args=(n,)) for n in (["p", "q"], ["s", "t"])]
        for t in ts:
            t.start()
        time.sleep(0.3)
        assert out == []  # the second waits behind the first
        held.release()
        for t in ts:
            t.join(5)
        assert sorted(map(str, out)) == ["['p', 'q']", "['s', 't']"]


def test_a_deadlock_with_single_locks_is_refused_at_once(daemon: Daemon):
    with client(daemon, owner="alice") as a, client(daemon, owner="bob") as b:
        la = a.lock("p", ttl=5)
        lb = b.lock("q", ttl=5)
        t = threading.Thread(target=lambda: a.lock("q", ttl=5, wait=5).release())
        t.start()
        assert wait_until(lambda: b.status("q").waiters == 1, 2)
        with pytest.raises(dlockd.Deadlock) as e:
            b.lock_all(["p", "r"], ttl=5, wait=5)
        assert e.value.owners == 2
        assert not b.status("r").held
        lb.release()
        t.join(5)
        la.release()


def test_one_name_is_the_ordinary_lock(daemon: Daemon):
    with client(daemon) as c:
        with c.lock_all(["solo"], ttl=5) as leases:
            assert leases.names == ["solo"] and c.status("solo").held
        assert not c.status("solo").held


def test_the_leases_of_a_multi_lock_survive_kill9_and_restart(rdaemon: Daemon):
    with client(rdaemon) as c, client(rdaemon) as other:
        leases = c.lock_all(["k1", "k2"], ttl=3, wait=0)
        assert all(lease._ls.proof for lease in leases)  # proof= of each grant
        rdaemon.kill9()
        time.sleep(0.2)
        rdaemon.restart()
        time.sleep(1.5)  # past a renewal at the restarted daemon
        assert leases.valid
        assert [other.status(n).token for n in leases.names] == leases.tokens
        leases.release()
        assert not other.status("k1").held and not other.status("k2").held


def test_a_multi_lock_waiting_through_a_restart_is_granted(rdaemon: Daemon):
    """The server gives back what a multi-lock took when its connection
    closes; the client sends it again (same request id) once reconnected,
    and it goes on waiting."""
    with client(rdaemon) as c1, client(rdaemon) as c2:
        held = c1.lock("w2", ttl=5)
        got: list = []
        t = threading.Thread(target=lambda: got.append(c2.lock_all(["w1", "w2"], ttl=5, wait=10)))
        t.start()
        assert wait_until(lambda: c1.status("w2").waiters == 1, 2)
        rdaemon.kill9()
        rdaemon.restart()
        assert wait_until(lambda: c1.status("w2").waiters == 1, 3)
        held.release()
        t.join(5)
        assert got and got[0].valid and got[0][1].token > held.token
        got[0].release()


def test_async_lock_all_and_cancellation_while_it_waits(daemon: Daemon):
    async def main() -> None:
        async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
            async with c.lock_all(["b", "a"], ttl=5, wait=0) as leases:
                assert isinstance(leases, dlockd.AsyncLeases)
                assert leases.names == ["a", "b"] and leases.valid
                assert (await o.status("a")).token == leases[0].token
            assert not (await o.status("a")).held
            held = await o.lock("b", ttl=5)
            task = asyncio.ensure_future(c.lock_all(["a", "b"], ttl=5, wait=None))
            for _ in range(200):
                if (await o.status("b")).waiters == 1:
                    break
                await asyncio.sleep(0.01)
            assert (await o.status("a")).held
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(200):
                if not (await o.status("a")).held:
                    break
                await asyncio.sleep(0.01)
            st = await o.status("b")
            assert not (await o.status("a")).held and st.waiters == 0
            await held.release()
            leases = await c.lock_all(["a", "b"], ttl=5, wait=1)
            await leases.release()

    asyncio.run(main())


def test_async_the_loss_of_one_lease_cancels_the_block_with_lock_lost(daemon: Daemon):
    async def main() -> None:
        async with dlockd.AsyncClient(daemon.addr) as c, dlockd.AsyncClient(daemon.addr) as o:
            with pytest.raises(dlockd.LockLost) as e:
                async with c.lock_all(["m1", "m2"], ttl=5) as leases:
                    await o.break_lease("m2", leases[1].token, "test")
                    await asyncio.sleep(5)  # cancelled at the loss
            assert e.value.name == "m2" and e.value.broken_by
            assert not (await o.status("m1")).held  # released at the end

    asyncio.run(main())


def test_a_with_block_whose_lease_was_lost_ends_with_lock_lost_and_releases_the_rest(
    daemon: Daemon,
):
    with client(daemon) as c, client(daemon) as o:
        with pytest.raises(dlockd.LockLost) as e:
            with c.lock_all(["n1", "n2"], ttl=5) as leases:
                o.break_lease("n1", leases[0].token, "test")
                assert wait_until(lambda: leases.lost[0].is_set(), 2)
                assert not leases.valid
        assert e.value.name == "n1"
        assert not o.status("n2").held
