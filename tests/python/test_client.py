# SPDX-License-Identifier: MIT
"""dlockd.Client against a real dlockd (and a real redis-server where
persistence matters): locking, leases, renewal and loss, reconnects,
authentication, TLS, fork. Timing assertions leave margins for a busy
2-core machine; each names the bound it protects."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time

import pytest

import dlockd
from dlockd import LostReason
from procs import Daemon, boottime, wait_until


def client(d: Daemon, **kw) -> dlockd.Client:
    return dlockd.Client(d.addr, **kw)


class Lost:
    """What on_lost saw."""

    def __init__(self) -> None:
        self.calls: list[tuple[dlockd.Lease, LostReason, float, float]] = []
        self.ev = threading.Event()

    def __call__(self, lease: dlockd.Lease, why: LostReason) -> None:
        self.calls.append((lease, why, boottime(), lease.deadline))
        self.ev.set()


# ---- locking -----------------------------------------------------------------


def test_lock_and_release_give_tokens_that_grow(daemon):
    with client(daemon) as c:
        a = c.lock("stock", ttl=5)
        assert isinstance(a.token, int) and a.token > 0
        assert a.valid and 4.5 < a.remaining() <= 5
        a.release()
        assert not a.valid and a.remaining() == 0
        with c.lock("stock", ttl=5) as b:
            assert b.token > a.token
        assert c.status("stock").held is False


def test_another_owner_times_out_on_a_try_and_after_a_wait(daemon):
    with client(daemon) as c1, client(daemon) as c2:
        with c1.lock("x", ttl=5):
            with pytest.raises(dlockd.LockTimeout) as e:
                c2.lock("x", wait=0)
            assert e.value.code == "BUSY" and "NO BUSY x" in e.value.text
            t0 = time.monotonic()
            with pytest.raises(dlockd.LockTimeout):
                c2.lock("x", wait=0.3)
            assert 0.25 < time.monotonic() - t0 < 2.0


def test_a_waiter_is_granted_when_the_holder_releases(daemon):
    with client(daemon) as c1, client(daemon) as c2:
        held = c1.lock("x", ttl=5)
        got: list[dlockd.Lease] = []
        t = threading.Thread(target=lambda: got.append(c2.lock("x", ttl=5, wait=5)))
        t.start()
        assert wait_until(lambda: c1.status("x").waiters == 1, 2)
        held.release()
        t.join(5)
        assert got and got[0].token > held.token and got[0].valid
        got[0].release()


def test_waiters_are_served_in_arrival_order(daemon):
    with client(daemon) as c0:
        held = c0.lock("q", ttl=5)
        order: list[int] = []
        clients = [client(daemon) for _ in range(3)]
        threads = []
        for i, c in enumerate(clients):
            def take(i=i, c=c):
                with c.lock("q", ttl=5, wait=10):
                    order.append(i)
            threads.append(threading.Thread(target=take))
            threads[-1].start()
            assert wait_until(lambda i=i: c0.status("q").waiters == i + 1, 2)
        held.release()
        for t in threads:
            t.join(10)
        assert order == [0, 1, 2]
        for c in clients:
            c.close()


def test_threads_of_one_client_take_a_name_in_turn(daemon):
    with client(daemon) as c:
        inside = 0
        most = 0
        mu = threading.Lock()

        def work():
            nonlocal inside, most
            for _ in range(5):
                with c.lock("t", ttl=5, wait=10):
                    with mu:
                        inside += 1
                        most = max(most, inside)
                    time.sleep(0.005)
                    with mu:
                        inside -= 1

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        assert most == 1


def test_check_gives_the_time_left_then_lock_lost_once_released(daemon):
    with client(daemon) as c, client(daemon) as other:
        lease = c.lock("f", ttl=5)
        assert 4 < lease.check() <= 5
        assert 4 < other.check("f", lease.token) <= 5
        lease.release()
        with pytest.raises(dlockd.LockLost) as e:
            other.check("f", lease.token)
        assert e.value.code == "STALE"


def test_status_holders_and_locks_describe_the_lock(daemon):
    with client(daemon, owner="alice") as c, client(daemon, owner="bob") as b:
        lease = c.lock("inv/1", ttl=5)
        st = c.status("inv/1")
        assert (st.held, st.token, st.owner, st.mode, st.limit, st.holders) == (
            True, lease.token, "alice", "exclusive", 1, 1)
        t = threading.Thread(target=lambda: pytest.raises(dlockd.LockTimeout, b.lock, "inv/1", wait=2))
        t.start()
        assert wait_until(lambda: c.status("inv/1").waiters == 1, 2)
        hs = c.holders("inv/1")
        assert [h.owner for h in hs.holders] == ["alice"] and hs.holders[0].token == lease.token
        assert [(w.owner, w.position) for w in hs.waiters] == [("bob", 1)]
        assert 0 < hs.waiters[0].wait <= 2
        # the status a HOLDERS gives is the first holder's, as STATUS's
        assert (hs.status.held, hs.status.token, hs.status.owner, hs.status.count) == (
            True, lease.token, "alice", 1)
        assert 0 < hs.status.ttl <= 5
        t.join()
        page = c.locks("inv/")
        assert [s.name for s in page.locks] == ["inv/1"] and page.more == 0
        assert "grants" in c.stats()
        lease.release()


def test_readers_share_a_lock_and_a_writer_waits_for_them(daemon):
    with client(daemon) as r1, client(daemon) as r2, client(daemon) as w:
        a = r1.rwlock("cat").read(ttl=5)
        b = r2.rwlock("cat").read(ttl=5, wait=0)
        assert a.mode == b.mode == "shared" and a.token != b.token
        with pytest.raises(dlockd.LockTimeout):
            w.rwlock("cat").write(wait=0.2)
        a.release()
        b.release()
        with w.rwlock("cat").write(ttl=5, wait=0) as x:
            assert x.mode == "exclusive" and x.token > b.token


def test_a_semaphore_admits_n_and_another_limit_is_refused(daemon):
    cs = [client(daemon) for _ in range(4)]
    try:
        held = [cs[i].semaphore("gpu", 3).acquire(ttl=5, wait=0) for i in range(3)]
        assert len({h.token for h in held}) == 3 and held[0].mode == "semaphore"
        with pytest.raises(dlockd.LockTimeout):
            cs[3].semaphore("gpu", 3).acquire(wait=0)
        with pytest.raises(dlockd.LimitMismatch) as e:
            cs[3].lock("gpu", wait=0)
        assert e.value.limit == 3
        for h in held:
            h.release()
    finally:
        for c in cs:
            c.close()


def test_a_reader_asking_to_write_is_told_it_would_deadlock(daemon):
    key = "k" * 32
    with client(daemon, owner="o", owner_key=key) as c1, \
            client(daemon, owner="o", owner_key=key) as c2:
        r = c1.lock("u", ttl=5, mode="shared")
        with pytest.raises(dlockd.UpgradeDeadlock):
            c2.lock("u", wait=0)
        r.release()


def test_a_wait_that_would_close_a_cycle_raises_deadlock_at_once(daemon):
    with client(daemon, owner="pa", owner_key="a" * 32) as a, \
            client(daemon, owner="pb", owner_key="b" * 32) as b:
        la = a.lock("A", ttl=10)
        lb = b.lock("B", ttl=10)
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(a.lock("B", ttl=10, wait=10)))
        t.start()
        assert wait_until(lambda: b.status("B").waiters == 1, 5)
        t0 = time.monotonic()
        with pytest.raises(dlockd.Deadlock) as e:
            b.lock("A", ttl=10, wait=10)
        assert time.monotonic() - t0 < 2  # at once, not after wait=10
        assert isinstance(e.value, dlockd.LockTimeout)  # as it was
        assert e.value.code == "DEADLOCK"
        assert e.value.owners == 2 and e.value.cycle == (("pa", "B"),)
        assert b.status("A").waiters == 0
        lb.release()
        t.join(5)
        assert got and got[0].valid
        got[0].release()
        la.release()


def test_bad_arguments_are_refused_before_anything_is_sent(daemon):
    with client(daemon) as c:
        for bad in ("", "a b", "a=b", "x" * 256):
            with pytest.raises(ValueError):
                c.lock(bad)
        with pytest.raises(ValueError):
            c.lock("x", ttl=0)
        with pytest.raises(ValueError):
            c.lock("x", mode="shared", limit=2)
        with pytest.raises(TypeError):
            c.lock("x", ttl="10s")


# ---- leases: renewal, loss --------------------------------------------------


def test_renewal_keeps_a_short_lease_past_its_ttl(daemon):
    with client(daemon) as c, client(daemon) as other:
        lease = c.lock("r", ttl=0.5)
        time.sleep(1.5)
        assert lease.valid and not lease.lost.is_set()
        with pytest.raises(dlockd.LockTimeout):
            other.lock("r", wait=0)
        lease.release()


def test_an_unrenewed_lease_is_lost_before_the_server_could_grant_it_again(daemon):
    lost = Lost()
    with client(daemon, renew=False, on_lost=lost) as c, client(daemon) as other:
        lease = c.lock("e", ttl=0.6)
        # the request went before lock() returned: the local deadline
        # counts from its sending (a bound from before the call failed
        # once on a loaded machine: the send came 3.3 ms after it)
        t_back = boottime()
        assert lost.ev.wait(2)
        _, why, at, deadline = lost.calls[0]
        assert why is LostReason.UNCONFIRMED and lease.lost.is_set()
        # called before the local deadline, which is before the server's
        assert at < deadline <= t_back + 0.6
        got = other.lock("e", ttl=1, wait=2)  # the server's expiry lets it in
        assert boottime() > deadline
        got.release()


def test_max_hold_stops_renewal_and_the_lease_is_lost_in_time(daemon):
    lost = Lost()
    with client(daemon, on_lost=lost) as c:
        t0 = boottime()
        lease = c.lock("m", ttl=0.4, max_hold=1.0)
        assert lost.ev.wait(3)
        _, why, at, deadline = lost.calls[0]
        assert why is LostReason.MAX_HOLD
        assert at < deadline <= t0 + 1.0 + 0.01
        assert 0.6 < at - t0 < 1.0
        lease.release()


def test_break_fires_on_lost_and_names_who_broke_it(daemon):
    lost = Lost()
    with client(daemon, on_lost=lost) as c, client(daemon) as op:
        lease = c.lock("b", ttl=10)
        op.break_lease("b", lease.token, reason="INC-1")
        assert lost.ev.wait(2)
        assert lost.calls[0][1] is LostReason.EXPIRED
        assert lease.reason is LostReason.EXPIRED and lease.broken_by == "default"
        with pytest.raises(dlockd.LockLost):
            op.break_lease("b", lease.token, reason="again")
        with pytest.raises(dlockd.NotHolder):
            lease.release()


def test_a_with_block_whose_lease_was_lost_ends_with_lock_lost(daemon):
    with client(daemon) as c, client(daemon) as op:
        with pytest.raises(dlockd.LockLost):
            with c.lock("w", ttl=10) as lease:
                op.break_lease("w", lease.token, reason="test")
                assert lease.lost.wait(2)
        assert c.status("w").held is False


def test_a_frozen_server_loses_the_lease_before_its_deadline_and_warns_first(daemon):
    lost, risk = Lost(), threading.Event()
    with client(daemon, on_lost=lost, on_at_risk=lambda l: risk.set()) as c:
        t_sent = boottime()
        lease = c.lock("z", ttl=1.0)
        daemon.signal(signal.SIGSTOP)
        try:
            assert risk.wait(1.5), "on_at_risk before the loss"
            assert not lost.calls
            assert lost.ev.wait(2)
            _, why, at, deadline = lost.calls[0]
            assert why is LostReason.UNCONFIRMED and at < deadline
            assert lease.deadline < t_sent + 1.0 + 1.0 / 3 + 0.05  # its last renewal's
        finally:
            daemon.signal(signal.SIGCONT)


def test_the_server_warning_calls_on_at_risk_when_renewal_is_off(daemon):
    risks: list[float] = []
    got = threading.Event()

    def at_risk(lease: dlockd.Lease) -> None:
        risks.append(lease.remaining())
        got.set()

    with client(daemon, renew=False, on_at_risk=at_risk) as c:
        t0 = time.monotonic()
        lease = c.lock("warned", ttl=1.0, warn=0.4)
        assert got.wait(2), "no on_at_risk from * EXPIRING"
        assert time.monotonic() - t0 >= 0.6 - 0.05, "warned early"
        assert 0 < risks[0] <= 0.4 and lease.valid
        got.clear()
        lease.refresh()  # confirmed: the next warning is news again
        assert got.wait(2) and len(risks) == 2
        lease.release()
        with pytest.raises(ValueError):
            c.lock("bad", ttl=1.0, warn=1.0)


def test_a_lock_delay_keeps_an_expired_lock_from_the_next_holder(daemon):
    with client(daemon, renew=False) as a, client(daemon) as b:
        with pytest.raises(ValueError):
            a.lock("bad", delay=61)
        t0 = time.monotonic()
        a.lock("delayed", ttl=0.3, delay=0.8)
        time.sleep(0.4)  # expired: in its delay
        st = b.status("delayed")
        assert not st.held and st.delay == 0.8 and st.delay_left > 0, st
        with pytest.raises(dlockd.LockTimeout):
            b.lock("delayed", wait=0)
        lease = b.lock("delayed", ttl=5)
        assert time.monotonic() - t0 >= 0.3 + 0.8 - 0.05, "granted during the delay"
        lease.release()


def test_a_shortening_refresh_moves_the_local_deadline_when_sent(daemon):
    with client(daemon, renew=False) as c:
        lease = c.lock("s", ttl=10)
        assert lease.refresh(0.5) <= 0.5
        assert lease.remaining() <= 0.5
        assert lease.refresh() <= 0.5  # renewals keep the TTL asked last
        lease.release()


def test_refresh_of_a_lease_the_server_ended_is_lock_lost(daemon):
    lost = Lost()
    with client(daemon, renew=False, lost_guard=0.001, on_lost=lost) as c, \
            client(daemon) as op:
        lease = c.lock("n", ttl=10)
        # end it behind the client's back, without an event: another
        # connection of... nobody; BREAK tells, so refresh after a STALE
        op.break_lease("n", lease.token, reason="x")
        assert lease.lost.wait(2)
        with pytest.raises(dlockd.LockLost):
            lease.refresh()


# ---- elections -----------------------------------------------------------------


def test_an_election_is_held_followed_and_handed_over(daemon):
    """An election is a lock (PROTOCOL.md, LOCK's value): a candidate
    leads with a value, a second waits with its own; a follower reads the
    leader (status, holders) and follows it (watch): a new value of the
    same term (a ``value`` event, decoded), the end of the term, the next
    leader with its value and a larger term. As libdlock's
    (tests/test_client.c an_election_is_held_followed_and_handed_over)."""
    with client(daemon, owner="cand-a") as a, client(daemon, owner="cand-b") as b, \
            client(daemon) as obs:
        lead = a.lock("elect/sched", ttl=10, value="host-a:7000")
        assert lead.value == "host-a:7000"
        box: list = []
        t = threading.Thread(
            target=lambda: box.append(b.lock("elect/sched", ttl=10, value="host-b:7002")))
        t.start()
        assert wait_until(lambda: obs.status("elect/sched").waiters == 1, 2)
        st = obs.status("elect/sched")
        assert (st.owner, st.token, st.value) == ("cand-a", lead.token, "host-a:7000")
        hs = obs.holders("elect/sched")
        assert [h.value for h in hs.holders] == ["host-a:7000"]
        assert hs.status.value == "host-a:7000"
        with obs.watch("elect/sched") as w:
            lead.proclaim("host-a:7001 primary")
            assert lead.value == "host-a:7001 primary" and lead.valid
            ev = w.get(2)
            assert ev is not None
            assert (ev.what, ev.owner, ev.token, ev.value) == (
                "value", "cand-a", lead.token, "host-a:7001 primary")
            assert obs.status("elect/sched").value == "host-a:7001 primary"
            lead.release()  # resign
            ev = w.get(2)
            assert ev is not None
            assert (ev.what, ev.owner, ev.token) == ("released", "cand-a", lead.token)
            assert ev.value == "host-a:7001 primary"
            ev = w.get(5)
            t.join(5)
            assert box, "the second candidate was not elected"
            nxt = box[0]
            assert ev is not None
            assert (ev.what, ev.owner, ev.token, ev.value) == (
                "granted", "cand-b", nxt.token, "host-b:7002")
            assert nxt.token > lead.token  # a later term
        st = obs.status("elect/sched")
        assert (st.owner, st.token, st.value) == ("cand-b", nxt.token, "host-b:7002")
        # a leader that resigned proclaims nothing
        with pytest.raises(dlockd.LockLost):
            lead.proclaim("too late")
        nxt.release()
        assert obs.status("elect/sched").value == ""


def test_a_value_is_encoded_and_cut_as_a_text_value(daemon):
    """A value is sent as a text value (a space %20, '%' %25, any other
    character '?', at most 128 bytes as sent, never cut inside an
    escape) and read back decoded; an empty proclaim is refused before
    anything is sent."""
    with client(daemon) as c, client(daemon) as obs:
        with c.lock("v", ttl=5, value="50% of\tx") as lease:
            assert obs.status("v").value == "50% of?x"
            assert lease.value == "50% of?x"
            with pytest.raises(ValueError):
                lease.proclaim("")
            with pytest.raises(TypeError):
                lease.proclaim(7)  # type: ignore[arg-type]
            assert obs.status("v").value == "50% of?x"
            lease.proclaim("x" * 126 + " y")  # the escape does not fit: cut before it
            assert obs.status("v").value == "x" * 126 == lease.value
        with c.lock("v", ttl=5, value="") as lease:  # "": none, as libdlock's
            assert obs.status("v").value == "" and lease.value == ""
            assert obs.holders("v").holders[0].value == ""
        with pytest.raises(TypeError):
            c.lock("v", value=b"bytes")  # type: ignore[arg-type]


def test_a_leader_whose_lease_ended_is_told_by_its_proclaim(daemon):
    with client(daemon, renew=False, lost_guard=0.001) as c, client(daemon) as op:
        lease = c.lock("n", ttl=10, value="me")
        op.break_lease("n", lease.token, reason="x")
        assert lease.lost.wait(2)
        with pytest.raises(dlockd.LockLost):
            lease.proclaim("still me")


# ---- persistence, restarts, Redis ------------------------------------------------


def test_a_lease_survives_kill9_and_restart_with_its_token(rdaemon):
    lost = Lost()
    with client(rdaemon, on_lost=lost) as c, client(rdaemon) as other:
        lease = c.lock("k", ttl=3)
        rdaemon.kill9()
        time.sleep(0.2)
        rdaemon.restart()
        time.sleep(1.5)  # past a renewal at the restarted daemon
        assert lease.valid and not lost.calls
        assert other.status("k").token == lease.token
        with pytest.raises(dlockd.LockTimeout):
            other.lock("k", wait=0)
        assert lease.check() > 1.0
        lease.release()
        assert other.status("k").held is False


def test_a_lease_redis_forgot_is_reclaimed_with_its_proof(redis):
    """The daemon killed and Redis flushed while the lease is held: the
    restarted daemon (its state dir says Redis went back) closes grants
    until the leases told may have ended. The client's renewal is refused
    NOT_HOLDER and it reclaims the lease with its grant's proof: the lease
    goes on, with its token, its lock delay and its value (the last one
    proclaimed), past the closure."""
    d = Daemon("--persist", "redis", "--redis", redis.url, "--log-level", "info")
    d.args += ["--state-dir", d.dir]
    d.start()
    try:
        lost = Lost()
        with client(d, on_lost=lost) as c, client(d) as other:
            lease = c.lock("k", ttl=3, delay=20, value="first")
            lease.proclaim("node a:7001")  # the value a RECLAIM says again
            d.kill9()
            redis.cli("FLUSHALL")
            d.start()
            # the client reconnects and reclaims it
            assert wait_until(lambda: other.status("k").token == lease.token, 5)
            # past the closure: the lease's 3 s and the horizon's margin
            end = time.monotonic() + 3 + 4 + 1.5
            while time.monotonic() < end:
                assert not lost.calls, lost.calls
                assert other.check("k", lease.token) > 0
                time.sleep(0.1)
            assert lease.valid
            st = other.status("k")
            assert st.token == lease.token
            assert st.delay == 20.0
            assert st.value == "node a:7001"
            lease.release()
    finally:
        d.stop()
        d.cleanup()


def test_a_waiter_is_queued_again_after_a_restart_and_granted(rdaemon):
    with client(rdaemon) as c1, client(rdaemon) as c2:
        held = c1.lock("w", ttl=5)
        got: list = []
        t = threading.Thread(target=lambda: got.append(c2.lock("w", ttl=5, wait=10)))
        t.start()
        assert wait_until(lambda: c1.status("w").waiters == 1, 2)
        time.sleep(0.1)  # the place is written to Redis
        rdaemon.kill9()
        rdaemon.restart()
        assert wait_until(lambda: c1.status("w").waiters == 1, 3)
        held.release()
        t.join(5)
        assert got and got[0].token > held.token
        got[0].release()


def test_a_release_unanswered_when_the_daemon_dies_is_sent_again(rdaemon):
    with client(rdaemon, request_timeout=0.3) as c, client(rdaemon) as other:
        lease = c.lock("u", ttl=30)
        rdaemon.signal(signal.SIGSTOP)
        lease.release()  # gives up waiting; the UNLOCK stays in the client
        rdaemon.kill9()
        rdaemon.restart()
        # released by the resent UNLOCK, long before the 30 s TTL
        assert wait_until(lambda: other.status("u").held is False, 5)


def test_redis_down_makes_changes_unavailable_and_unconfirmed_leases_lost(rdaemon):
    lost, risk = Lost(), threading.Event()
    with client(rdaemon, on_lost=lost, on_at_risk=lambda l: risk.set()) as c:
        asked = time.monotonic()
        lease = c.lock("d", ttl=1.5)
        rdaemon.redis.kill9()
        assert wait_until(lambda: _unavailable(c), 5)
        assert risk.wait(3)
        assert lost.ev.wait(3)
        assert lost.calls[0][1] in (LostReason.UNCONFIRMED, LostReason.EXPIRED)
        assert lost.calls[0][2] < lost.calls[0][3]
        rdaemon.redis.start()
        assert wait_until(lambda: not _unavailable(c), 10)
        # the daemon is back within its reconnect backoff, maybe before
        # the server's end of the lease: past it (and a reap tick), the
        # server has ended it too
        time.sleep(max(0.0, asked + 1.5 + 1.0 - time.monotonic()))
        with pytest.raises(dlockd.NotHolder):
            lease.release()


def test_a_grant_answered_too_late_to_use_is_given_back(rdaemon):
    # Redis paused for most of the TTL: the grant is answered once Redis
    # has it, when the lease is already inside its lost guard. lock() must
    # not return it as a success (it was reported lost the next tick).
    lost = Lost()
    rp = rdaemon.redis.proc
    with client(rdaemon, on_lost=lost) as c, client(rdaemon) as other:
        rp.send_signal(signal.SIGSTOP)
        threading.Timer(0.7, rp.send_signal, (signal.SIGCONT,)).start()
        with pytest.raises(dlockd.LockTimeout):
            c.lock("late", ttl=1, wait=0)
        other.lock("late", ttl=1, wait=0).release()  # given back at once
        rp.send_signal(signal.SIGSTOP)
        threading.Timer(0.7, rp.send_signal, (signal.SIGCONT,)).start()
        lease = c.lock("late", ttl=1, wait=5)  # asked again: a usable lease
        assert lease.valid and not lost.calls
        lease.release()


def _unavailable(c: dlockd.Client) -> bool:
    try:
        c.lock("probe", ttl=1, wait=0).release()
        return False
    except dlockd.Unavailable as e:
        assert e.code == "UNAVAILABLE"
        return True


# ---- owners, authentication, environment ------------------------------------------


def test_an_owner_id_needs_its_key_and_the_key_makes_the_same_owner(daemon):
    with client(daemon, owner="backup") as c:
        lease = c.lock("o", ttl=5)
        with pytest.raises(dlockd.Denied) as e:
            client(daemon, owner="backup")
        assert "need=key" in e.value.text
        with client(daemon, owner="backup", owner_key=c.owner_key) as same:
            assert same.check("o", lease.token) > 0
            assert same.status("o").owner == "backup"
        lease.release()


def test_a_reconnect_refused_its_owner_grants_nothing_to_another(daemon):
    # The daemon restarted without its owners (no persistence), and
    # another client took the id "twin" first: the reconnect's HELLO is
    # refused (NO DENIED twin need=key). A LOCK sent behind that HELLO
    # would run as the connection's anonymous owner and hold k for its
    # TTL, granted to nobody; the client sends nothing until HELLO is
    # answered OK.
    #
    # The other one must say twin before this client is back. The client
    # tries again every second by then, and a try may land between the
    # daemon's first accept and the other's HELLO (a few ms of each
    # second, longer on a loaded machine): twin is then the client's
    # again, the other is refused, and the restart is set up again.
    with client(daemon, owner="twin", request_timeout=1.5) as c, \
            client(daemon) as other:
        for _ in range(5):
            assert daemon.stop() == 0
            time.sleep(1.7)  # the client's pauses grow to their longest
            daemon.restart()
            copy = socket.create_connection(("127.0.0.1", daemon.port), timeout=5)
            copy.sendall(b"HELLO owner=twin\r\n")
            said = copy.makefile("rb").readline()
            if said.startswith(b"OK HELLO"):
                break
            assert said.startswith(b"NO DENIED twin need=key"), said
            copy.close()
        else:
            pytest.fail("the client was back first at every restart")
        with pytest.raises(dlockd.DlockError):
            c.lock("k", ttl=5, wait=0)
        st = other.status("k")
        assert st.held is False, f"k is held by {st.owner}"
        # the id is free again once the other one has gone
        copy.close()
        for _ in range(10):
            try:
                lease = c.lock("k", ttl=5, wait=0)
                break
            except dlockd.DlockError:
                pass
        else:
            pytest.fail("twin never got its id back")
        assert other.status("k").owner == "twin"
        lease.release()


def test_two_clients_of_one_owner_never_both_hold_a_lock(daemon):
    # Two processes that inherit one DLOCK_OWNER=<id>=<key> are one owner
    # to the server, which grants the second a reentry of the first one's
    # lease: the second is refused, at once whatever its wait, and the
    # lease keeps exactly the first one's hold.
    key = "p" * 32
    with client(daemon, owner="pair", owner_key=key) as a, \
            client(daemon, owner="pair", owner_key=key) as b:
        held = a.lock("po", ttl=10)
        for wait in (0, 3, None):
            t0 = time.monotonic()
            with pytest.raises(dlockd.HeldByOwner) as e:
                b.lock("po", ttl=10, wait=wait)
            assert time.monotonic() - t0 < 1.0, "refused at once"
            assert isinstance(e.value, dlockd.LockTimeout)
            assert e.value.code == "HELD_BY_OWNER" and "another process" in str(e.value)
        assert b.status("po").count == 1  # on b's connection: after its give-back
        held.release()
        with b.lock("po", ttl=10, wait=0) as mine:  # free again: b's
            assert mine.valid and a.status("po").count == 1
        assert a.status("po").held is False


def test_a_second_client_of_one_owner_is_refused_when_its_wait_is_served(daemon):
    # Both clients of the owner wait behind another owner: the first is
    # granted the lease, the second a reentry of it by event.
    key = "q" * 32
    with client(daemon) as o, client(daemon, owner="pair", owner_key=key) as a, \
            client(daemon, owner="pair", owner_key=key) as b:
        held = o.lock("pq", ttl=10)
        got: dict[str, object] = {}

        def take(who: str, c: dlockd.Client) -> None:
            try:
                got[who] = c.lock("pq", ttl=10, wait=5)
            except dlockd.DlockError as err:
                got[who] = err

        ta = threading.Thread(target=take, args=("a", a))
        ta.start()
        assert wait_until(lambda: o.status("pq").waiters == 1, 2)
        tb = threading.Thread(target=take, args=("b", b))
        tb.start()
        assert wait_until(lambda: o.status("pq").waiters == 2, 2)
        held.release()
        ta.join(5)
        tb.join(5)
        assert isinstance(got["a"], dlockd.Lease), got
        assert isinstance(got["b"], dlockd.HeldByOwner), got
        assert b.status("pq").count == 1  # after its give-back
        got["a"].release()
        assert o.status("pq").held is False


def test_the_environment_configures_the_client_as_the_cli(daemon, monkeypatch):
    monkeypatch.setenv("DLOCK_PORT", str(daemon.port))
    monkeypatch.setenv("DLOCK_OWNER", "envowner=" + "e" * 20)
    with dlockd.Client() as c:
        assert c.owner == "envowner" and c.owner_key == "e" * 20
        c.lock("env", ttl=1).release()
    monkeypatch.delenv("DLOCK_PORT")
    monkeypatch.setenv("DLOCK_SERVERS", f"127.0.0.1:{daemon.port}")
    with dlockd.Client() as c:
        c.ping()


def test_a_password_is_needed_and_a_wrong_one_denied():
    d = Daemon("--persist", "none", conf="[server]\npassword = s3cret-for-tests\n").start()
    try:
        with pytest.raises(dlockd.Denied):
            dlockd.Client(d.addr)
        with pytest.raises(dlockd.Denied):
            dlockd.Client(d.addr, password="wrong")
        with dlockd.Client(d.addr, password="s3cret-for-tests") as c:
            c.lock("p", ttl=1).release()
    finally:
        d.cleanup()


def test_a_user_logs_in_with_its_secret_and_is_denied_outside_its_grants():
    secret = "app-secret-8d2e4f6a1b3c5d7e"
    h = "sha256:541ec7c9d1036f5553195d86ce23d116235e3910d32d2b913b4698297e5f8ec4"
    d = Daemon("--persist", "none")
    users = d.file("users", f"app {h} lock=app/ read=app/\n")
    d.conf = d.file("dlockd.conf", f"[server]\nusers_file = {users}\n")
    d.start()
    try:
        with dlockd.Client(d.addr, user="app", secret=secret) as c:
            c.lock("app/1", ttl=1).release()
            with pytest.raises(dlockd.Denied) as e:
                c.lock("other/1", ttl=1)
            assert "need=lock" in e.value.text
        with pytest.raises(dlockd.Denied):
            dlockd.Client(d.addr, user="app", secret="not-the-secret")
    finally:
        d.cleanup()


# ---- TLS -------------------------------------------------------------------------


def _certs(dir: str) -> None:
    script = """set -e; cd '%s'
ec='-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes'
openssl req -x509 $ec -keyout ca.key -out ca.pem -days 30 -subj /CN=ca
openssl req -x509 $ec -keyout wrong.key -out wrong.pem -days 30 -subj /CN=wrong
openssl req $ec -keyout server.key -out server.csr -subj /CN=dlockd
printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile server.ext -out server.pem
""" % dir
    subprocess.run(["sh", "-c", script], check=True, capture_output=True)


def test_tls_verifies_the_servers_certificate_and_name(tmp_path):
    import ssl

    _certs(str(tmp_path))
    d = Daemon("--persist", "none", "--tls-cert", str(tmp_path / "server.pem"),
               "--tls-key", str(tmp_path / "server.key")).start()
    try:
        with dlockd.Client(d.addr, tls_ca=str(tmp_path / "ca.pem")) as c:
            c.lock("t", ttl=1).release()
        with pytest.raises(ssl.SSLError):
            dlockd.Client(d.addr, tls_ca=str(tmp_path / "wrong.pem"))
        with pytest.raises(ssl.SSLError):  # the certificate names 127.0.0.1
            dlockd.Client(f"localhost:{d.port}", tls_ca=str(tmp_path / "ca.pem"))
        with pytest.raises(dlockd.Unavailable):  # plaintext to a TLS port
            dlockd.Client(d.addr, connect_timeout=0.5)
    finally:
        d.cleanup()


# ---- more than one daemon ----------------------------------------------------------


def test_clients_follow_a_takeover_between_two_daemons(redis):
    a = Daemon("--persist", "redis", "--redis", redis.url, "--node-id", "a",
               "--leader-lease", "1s").start()
    b = Daemon("--persist", "redis", "--redis", redis.url, "--node-id", "b",
               "--leader-lease", "1s").start()
    lost = Lost()
    try:
        servers = f"{b.addr},{a.addr}"  # the standby first: it redirects
        with dlockd.Client(servers, on_lost=lost) as c, \
                dlockd.Client(servers) as w:
            lease = c.lock("ha", ttl=6)
            got: list = []
            t = threading.Thread(target=lambda: got.append(w.lock("ha", ttl=6, wait=20)))
            t.start()
            assert wait_until(lambda: c.status("ha").waiters == 1, 3)
            a.kill9()
            time.sleep(4.0)  # the take-over, then a renewal (TTL/3) at b
            # b may still be writing its table back (changes refused with
            # ERR UNAVAILABLE meanwhile: on a loaded machine, after 4 s)
            assert wait_until(lambda: not _unavailable(c), 10)
            assert lease.valid and not lost.calls
            assert c.status("ha").token == lease.token
            assert not got
            lease.release()
            t.join(10)
            assert got and got[0].token > lease.token
            got[0].release()
    finally:
        a.cleanup()
        b.cleanup()


def test_a_stopped_active_is_left_for_the_standby(redis):
    # SIGSTOP: hung, not dead (its port still accepts). Found from outside
    # in the Go client: the clients stayed on it for good.
    a = Daemon("--persist", "redis", "--redis", redis.url, "--node-id", "a",
               "--leader-lease", "1s").start()
    b = Daemon("--persist", "redis", "--redis", redis.url, "--node-id", "b",
               "--leader-lease", "1s").start()
    lost = Lost()
    try:
        with dlockd.Client(f"{a.addr},{b.addr}", on_lost=lost, request_timeout=1.5) as c:
            lease = c.lock("st", ttl=20)
            a.signal(signal.SIGSTOP)  # left stopped; the cleanup ends it

            def answered() -> bool:
                try:
                    c.ping()
                    return True
                except dlockd.DlockError:
                    return False
            assert wait_until(answered, 30)
            assert lease.valid and not lost.calls
            assert c.status("st").token == lease.token
            lease.release()
    finally:
        a.cleanup()
        b.cleanup()


def test_a_server_of_another_cluster_in_the_list_is_refused(redis):
    # node b's URL names db 1: another keyspace, another lock table
    a = Daemon("--persist", "redis", "--redis", redis.url, "--node-id", "a",
               "--leader-lease", "1s").start()
    b = Daemon("--persist", "redis", "--redis", redis.url[:-1] + "1",
               "--node-id", "b", "--leader-lease", "1s").start()
    try:
        assert wait_until(lambda: redis.cli("-n", "1", "GET", "dlock:cluster") != "", 10)
        ida = redis.cli("GET", "dlock:cluster")
        idb = redis.cli("-n", "1", "GET", "dlock:cluster")
        assert len(ida) == 32 and len(idb) == 32 and ida != idb
        with dlockd.Client(f"{a.addr},{b.addr}", reconnect=True) as c:
            assert c.cluster == ida
            c.lock("job", ttl=60)
            a.kill9()
            with pytest.raises(dlockd.ClusterMismatch) as e:
                c.lock("job2", ttl=60, wait=0)
            assert "two clusters" in str(e.value) and ida in str(e.value) \
                and idb in str(e.value)
            assert isinstance(e.value, dlockd.Unavailable)
        with dlockd.Client(b.addr) as probe:
            assert not probe.status("job2").held  # nothing was sent to b
            assert probe.cluster == idb
        with pytest.raises(dlockd.ClusterMismatch):
            dlockd.Client(b.addr, cluster=ida)
    finally:
        a.cleanup()
        b.cleanup()


# ---- fork ------------------------------------------------------------------------


def test_a_forked_child_neither_owns_nor_releases_the_parents_lease(daemon):
    with client(daemon) as c:
        lease = c.lock("fk", ttl=0.6)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                if lease.owned:
                    code = 1
                lease.release()  # must not send anything
                with lease:
                    pass
                try:
                    c.lock("other", wait=0)
                    code = 2
                except dlockd.ConnectionLost:
                    pass
                with dlockd.Client(daemon.addr) as mine:
                    try:
                        mine.lock("fk", wait=0)
                        code = 3
                    except dlockd.LockTimeout:
                        pass
            except BaseException:
                code = 4
            os.write(w, bytes([code]))
            os._exit(0)
        os.close(w)
        code = os.read(r, 1)
        os.waitpid(pid, 0)
        assert code == b"\x00", f"child failed at step {code[0]}"
        time.sleep(1.0)  # renewed by the parent alone, past its TTL
        assert lease.valid and lease.owned
        assert c.status("fk").token == lease.token
        lease.release()


# ---- who holds it ------------------------------------------------------------


def _proc_cmdline() -> str:
    with open("/proc/self/cmdline", "rb") as f:
        words = f.read().rstrip(b"\0").split(b"\0")
    return " ".join(w.decode("ascii", "replace") for w in words)


def test_a_client_describes_itself_by_default(daemon):
    """Its host, pid and program name -- never its arguments, which may
    hold a secret (found from outside: a password given as an argument
    showed in STATUS to every reader of the lock); describe="full" sends
    the command line."""
    import socket

    with client(daemon) as c, client(daemon, describe=False) as quiet:
        with c.lock("d", ttl=5):
            st = quiet.status("d")
            assert st.host == socket.gethostname()[: dlockd._wire.DESC_HOST_MAX]
            assert st.pid == os.getpid()
            assert st.cmd == dlockd._core._program_name()
            assert st.cmd and " " not in st.cmd
            assert st.held_for is not None and 0 <= st.held_for < 5
    with client(daemon, describe="full") as c, client(daemon, describe=False) as quiet:
        with c.lock("d", ttl=5):
            st = quiet.status("d")
            assert st.cmd == dlockd._wire.desc_decode(
                dlockd._wire.desc_encode(_proc_cmdline(), dlockd._wire.DESC_CMD_MAX)
            )
    with pytest.raises(ValueError):
        dlockd.Client(daemon.addr, describe="everything")
        with quiet.lock("q", ttl=5):
            st = c.status("q")
            assert (st.host, st.pid, st.cmd) == ("", 0, "")


def test_a_description_is_encoded_and_cut_to_the_protocol(daemon):
    with client(daemon, desc_host="build host", desc_pid=77, desc_cmd="job\n--now " + "x" * 300) as c:
        with c.lock("said", ttl=5):
            h = c.holders("said").holders[0]
            assert (h.host, h.pid) == ("build host", 77)
            # a line break is '?', and the command is cut at 128 bytes as sent
            assert h.cmd.startswith("job?--now x") and len(h.cmd) == 128 - 2
            page = c.locks("said")
            assert page.locks[0].cmd == h.cmd
    with pytest.raises(ValueError):
        client(daemon, desc_pid=0)


def test_a_busy_try_names_the_holder(daemon):
    with client(daemon, owner="deploy-7", desc_host="web3", desc_pid=4242,
                desc_cmd="make deploy") as a, client(daemon) as b:
        with a.lock("x", ttl=30):
            time.sleep(0.05)
            with pytest.raises(dlockd.LockTimeout) as e:
                b.lock("x", wait=0)
            # the old words first, then the holder
            assert e.value.text.startswith("NO BUSY x ")
            h = e.value.holder
            assert h is not None and h.owner == "deploy-7"
            assert (h.host, h.pid, h.cmd) == ("web3", 4242, "make deploy")
            assert h.held_for is not None and h.held_for >= 0.05
            assert 0 < h.ttl <= 30


def test_a_hung_first_server_leaves_time_for_the_next(daemon):
    """A listed server that accepts connections and never answers
    (stopped, hung: here a socket nobody accepts on) gets its share of
    connect_timeout, not all of it: the next server is asked in time."""
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        servers = f"127.0.0.1:{hung.getsockname()[1]},{daemon.addr}"
        with dlockd.Client(servers, connect_timeout=3.0) as c:
            c.ping()
    finally:
        hung.close()


class _Hooks:
    """What a driver does for the core: here, remember what ended."""

    def __init__(self) -> None:
        self.done_reqs: list = []

    def done(self, req) -> None:
        self.done_reqs.append(req)

    def lost(self, lease) -> None:
        pass

    def at_risk(self, lease) -> None:
        pass

    def contended(self, lease) -> None:
        pass

    def turn(self, ticket) -> None:
        pass


def _core_up():
    """The client's protocol state machine, connected to a server that is
    this test: HELLO answered, nothing else sent."""
    from dlockd import _core, _options

    hooks = _Hooks()
    core = _core.Core(_options.build("127.0.0.1:1", {"describe": False}), hooks)
    now = _core.now_ms()
    core.connecting()
    core.connected(now)
    ok = core.data_received(
        b"OK HELLO version=0.4.0 owner=o key=0123456789abcdef0123456789abcdef"
        b" user=default auth=none persist=none default_ttl_ms=30000"
        b" max_ttl_ms=86400000 role=active\r\n",
        now,
    )
    assert ok
    core.out.clear()
    return core, hooks, now


@pytest.mark.parametrize(
    "grant",
    [
        b"OK GRANTED x 7 60000 holds=1\r\n",  # 60 s for a 1 s lease
        b"OK GRANTED x 0 900 holds=1\r\n",  # token 0
    ],
)
def test_a_server_that_grants_what_none_may_is_dropped(grant):
    """Found from outside (issue 31): a client must survive a hostile
    server. A grant no server may give fails the request with
    ProtocolError and drops the connection; the client never counts on
    it. (holds= past what this client has is another process's lease of
    the owner: given back, the request fails, as before.)"""
    core, hooks, now = _core_up()
    q = core.lock_request("x", 1000, 0, False, 0, now)
    core.submit(q, now)
    assert core.data_received(grant, now) is False
    assert isinstance(q.error, dlockd.ProtocolError)
    assert not [ls for ls in core.leases if ls.live()]


def test_a_server_that_announces_an_endless_body_is_dropped():
    core, hooks, now = _core_up()
    q = core.simple_request("STATS")
    core.submit(q, now)
    assert core.data_received(b"OK STATS 999999999\r\n", now) is False
    assert isinstance(q.error, dlockd.ProtocolError)


@pytest.mark.parametrize(
    "lines",
    [
        b"OK GRANTED zzz 7 900 holds=1 id={tag}\r\n",  # another lock
        b"OK GRANTED x 7 900 holds=0 id={tag}\r\n",  # no hold
        b"OK GRANTED x 99999999999999999999999 900 holds=1 id={tag}\r\n",
        b"OK QUEUED x 1 id={tag}\r\n* TIMEOUT other id={tag}\r\n",
    ],
)
def test_a_grant_or_end_of_another_lock_is_not_believed(lines):
    """Found from outside (issue 31): a grant of another lock, of no
    hold, with a token past 64 bits, or a wait's end for another lock
    was believed. The request fails with ProtocolError, the connection
    is dropped."""
    core, hooks, now = _core_up()
    q = core.lock_request("x", 1000, 5000, False, 0, now)
    core.submit(q, now)
    assert core.data_received(lines.replace(b"{tag}", q.tag.encode()), now) is False
    assert isinstance(q.error, dlockd.ProtocolError)
    assert not [ls for ls in core.leases if ls.live()]


def test_grants_nobody_asked_for_drop_the_server():
    """A server streaming "* GRANTED" of locks nobody waits for had the
    client queue an UNLOCK for each; only a grant that may have crossed
    the CANCEL of a wait given up is given back."""
    core, hooks, now = _core_up()
    core.out.clear()
    assert core.data_received(b"* GRANTED other 7 1000 holds=1\r\n", now) is False
    assert b"UNLOCK" not in bytes(core.out)


def test_a_line_with_a_bare_cr_is_not_a_reply():
    core, hooks, now = _core_up()
    q = core.lock_request("x", 1000, 0, False, 0, now)
    core.submit(q, now)
    line = f"OK GRANTED x 7 900 holds=1\rOK GRANTED x 7 99999 id={q.tag}\r\n"
    assert core.data_received(line.encode(), now) is False
    assert not [ls for ls in core.leases if ls.live()]
