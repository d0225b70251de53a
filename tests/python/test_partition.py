# SPDX-License-Identifier: MIT
"""dlockd.Client and AsyncClient over a partitioned service: three real
dlockd daemons (partitions p0, p1, p2) on one real redis-server, the map
made by PARTITION INIT and two PARTITION MOVEs (p0: 0-5460, p1:
5461-10922, p2: 10923-16383). The clients are given p0's daemon only and
route each name to its partition (MAP, then NO MOVED when the map
changes); the leases are looked at on each daemon through a raw
connection. Also the slot function (Redis's CLUSTER KEYSLOT vectors),
the map's parsing, the redirect limit (a scripted daemon that always
says MOVED) and the unpartitioned daemon (MAP 0: nothing changes)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Iterator

import pytest

import dlockd
from dlockd import _route
from procs import Daemon, Redis, free_port, wait_until

NPARTS = 3
# names of each partition once the map is made (their slots: 5061, 9995,
# 12182), and one more of p2 whose slot the async test moves
BAR, QUX, FOO = "bar", "qux", "foo"


def _name_in(lo: int, hi: int, avoid: set[int]) -> str:
    for k in range(100000):
        n = f"n{k}"
        if lo <= _route.slot(n) <= hi and _route.slot(n) not in avoid:
            return n
    raise AssertionError("no name")


ANOTHER_OF_P2 = _name_in(10923, 16383, {_route.slot(FOO)})


def _tag_in(lo: int, hi: int, avoid: set[int]) -> str:
    """A "{tag}" whose slot is in lo-hi and not in avoid: the names
    "{tag}..." share it (the slot a test moves with its locks)."""
    for k in range(100000):
        t = f"{{m{k}}}"
        if lo <= _route.slot(t) <= hi and _route.slot(t) not in avoid:
            return t
    raise AssertionError("no tag")


# slots of p0 that the tests of leases carried by a move move to p1 (and
# back): one each, none the other tests' names use
_P0_USED = {_route.slot(BAR), _route.slot(_name_in(0, 5460, set()))}
MOVE_SYNC = _tag_in(0, 5460, _P0_USED)
MOVE_WAIT = _tag_in(0, 5460, _P0_USED | {_route.slot(MOVE_SYNC)})
MOVE_ASYNC = _tag_in(0, 5460, _P0_USED | {_route.slot(MOVE_SYNC), _route.slot(MOVE_WAIT)})
MOVE_MULTI = _tag_in(0, 5460, _P0_USED | {_route.slot(t) for t in (MOVE_SYNC, MOVE_WAIT,
                                                                    MOVE_ASYNC)})
MOVE_TURN = _tag_in(0, 5460, _P0_USED | {_route.slot(t) for t in (MOVE_SYNC, MOVE_WAIT,
                                                                   MOVE_ASYNC, MOVE_MULTI)})


# ---- a raw connection ---------------------------------------------------


def raw(port: int, line: str) -> list[str]:
    """One request on a connection of its own: the reply's lines (a MAP's
    with its body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        f = s.makefile("rwb")
        f.write(line.encode() + b"\r\n")
        f.flush()
        out = [f.readline().decode().rstrip("\r\n")]
        w = out[0].split()
        if out[0].startswith("OK MAP "):
            out += [f.readline().decode().rstrip("\r\n") for _ in range(int(w[3]))]
        return out


def epoch_of(d: Daemon) -> int:
    return int(raw(d.port, "MAP")[0].split()[2])


def state_of(d: Daemon, name: str) -> str:
    """"held", "free", "moved" (another partition's), or "unavailable"
    (its slot on its way between two partitions with its locks)."""
    line = raw(d.port, f"STATUS {name}")[0]
    if line.startswith("NO MOVED "):
        return "moved"
    if line.startswith("ERR UNAVAILABLE "):
        return "unavailable"
    assert line.startswith(f"OK STATUS {name} "), line
    return "held" if " state=held " in line else "free"


def where(ds: list[Daemon], name: str) -> list[str]:
    return [state_of(d, name) for d in ds]


def settled(ds: list[Daemon], name: str, want: list[str]) -> bool:
    """where() says `want` (within 10 s): after a move that carries locks,
    the receiving daemon takes them in once it has read the map."""
    return wait_until(lambda: where(ds, name) == want, 10, 0.02)


def move(ds: list[Daemon], slots: str, src: int, dst: int) -> int:
    """PARTITION MOVE <slots> p<dst> on p<src>'s daemon; every daemon
    then reads that map (within a second or two). Its epoch. (A daemon
    that carries the slots' locks along says how many: locks=<n>.)"""
    line = raw(ds[src].port, f"PARTITION MOVE {slots} p{dst}")[0]
    w = line.split()
    assert w[:2] == ["OK", "PARTITION"] and w[2].startswith("epoch="), line
    assert w[3] == f"to=p{dst}" and all(x.startswith("locks=") for x in w[4:]), line
    e = int(w[2].split("=")[1])
    assert wait_until(lambda: all(epoch_of(d) >= e for d in ds), 15, 0.05)
    return e


# ---- the service ----------------------------------------------------------


class Service:
    """The three daemons; the map made (INIT, then the two MOVEs) unless
    mapped=False (then make_map() does it: the daemons say MAP 0 0
    until then)."""

    def __init__(self, mapped: bool = True) -> None:
        self.redis = Redis("always")
        self.ds: list[Daemon] = []
        self.epoch = 0
        for i in range(NPARTS):
            conf = (
                "[persistence]\npersist = redis\n"
                f"redis = {self.redis.url}\nredis_prefix = t:\n"
                f"[partition]\nid = p{i}\n"
            )
            self.ds.append(Daemon(conf=conf).start())
        if mapped:
            self.make_map()

    def make_map(self) -> None:
        p0 = self.ds[0]
        assert raw(p0.port, "PARTITION INIT") == ["OK PARTITION epoch=1"]
        # each daemon adds its address to the map on its own
        assert wait_until(
            lambda: all(f"part p{i} addrs={d.addr} " in "\n".join(raw(p0.port, "MAP"))
                        for i, d in enumerate(self.ds)),
            15, 0.05,
        ), raw(p0.port, "MAP")  # fmt: skip
        move(self.ds, "5461-10922", 0, 1)
        self.epoch = move(self.ds, "10923-16383", 0, 2)

    def cleanup(self) -> None:
        for d in self.ds:
            d.cleanup()
        self.redis.cleanup()


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    s = Service()
    yield s
    s.cleanup()


# ---- unit: the slot, the map --------------------------------------------

VECTORS = {
    "123456789": 12739, "foo": 12182, "bar": 5061, "hello": 866, "somekey": 11058,
    "foo{hash_tag}": 2515, "{user1000}.following": 3443, "a{}b": 13694, "{}{x}": 3257,
    "x{y}{z}": 12222, "{": 4092, "qux": 9995,
}  # fmt: skip


@pytest.mark.parametrize("name,slot", sorted(VECTORS.items()))
def test_the_slot_is_redis_clusters_keyslot(name, slot):
    assert _route.slot(name) == slot
    assert _route.slot(name.encode()) == slot


def test_a_map_is_the_union_of_its_slots_lines():
    m = _route.parse_map(7, [
        "part p0 addrs=10.0.0.1:7400,10.0.0.2:7400 floor=0",
        "slots p0 0-99,200",
        "slots p0 300-16383",
        "part p1 addrs=- floor=1796057220000000000",
        "slots p1 100-199,201-299",
        "part p2 addrs=10.0.0.3:7400 floor=5",
        "slots p2 -",
    ])  # fmt: skip
    assert m.epoch == 7 and list(m.parts) == ["p0", "p1", "p2"]
    assert m.parts["p0"].addrs == ("10.0.0.1:7400", "10.0.0.2:7400")
    assert m.parts["p1"].addrs == () and m.parts["p1"].floor == 1796057220000000000
    assert m.slots_of("p1") == [*range(100, 200), *range(201, 300)]
    assert m.slots_of("p2") == []
    assert len(m.slots_of("p0")) == 16384 - 199
    assert m.partition_of("bar") == "p0"  # 5061
    with pytest.raises(dlockd.ProtocolError):
        _route.parse_map(1, ["slots p0 0-16384"])
    with pytest.raises(dlockd.ProtocolError):
        _route.parse_map(1, ["what is this"])


def test_the_router_keeps_the_newest_map_and_follows_moved():
    m5 = _route.parse_map(5, ["part p0 addrs=a:1 floor=0", "slots p0 0-8191",
                              "part p1 addrs=b:1 floor=0", "slots p1 8192-16383"])
    rt = _route.Routes(m5, 0.0)
    assert rt.target(BAR) == "p0" and rt.target(FOO) == "p1"

    def moved(line: str) -> dlockd.Moved:
        e = dlockd._errors.error_of("NO", "MOVED", line)
        assert isinstance(e, dlockd.Moved)
        return e

    # a stale daemon (epoch 4 < 5) or a race (5): to the partition it names
    e = moved("NO MOVED p2 c:1,c:2 4")
    assert (e.partition, e.addrs, e.epoch) == ("p2", ("c:1", "c:2"), 4)
    assert rt.redirect(e, FOO, "p1") == "p2" and rt.addrs_of("p2") == ("c:1", "c:2")
    assert rt.redirect(moved("NO MOVED p0 - 5"), FOO, "p1") == "p0"
    # a newer map: kept, its moved daemons said; an older one is not
    m7 = _route.parse_map(7, ["part p0 addrs=a:2 floor=0", "slots p0 0-100",
                              "part p1 addrs=b:1 floor=0", "slots p1 101-16383",
                              "part p2 addrs=c:3 floor=9", "slots p2 -"])
    assert rt.adopt(m7, 1.0) == {"p0": ("a:2",), "p2": ("c:3",)}
    assert rt.epoch == 7 and rt.target(BAR) == "p1" and rt.addrs_of("p2") == ("c:3",)
    assert rt.adopt(m5, 2.0) == {} and rt.epoch == 7
    # the map (as new as the MOVED) names another partition than the one
    # tried: there
    assert rt.redirect(moved("NO MOVED p1 b:1 7"), BAR, "p0") == "p1"
    assert "moved 4 times" in str(_route.too_many(BAR, moved("NO MOVED p1 b:1 7")))
    # a partition behind the router's map (epoch 6 < 7) that the map gives
    # the name points back where the name was: asked again, not followed
    assert _route.behind(rt, moved("NO MOVED p0 a:2 6"), BAR, "p1")
    assert not _route.behind(rt, moved("NO MOVED p0 a:2 7"), BAR, "p1")
    assert not _route.behind(rt, moved("NO MOVED p0 a:2 6"), BAR, "p0")
    # a slot on its way between two partitions with its locks
    for line in ("ERR UNAVAILABLE slot 5061 is moving to another partition, try again",
                 "ERR UNAVAILABLE slot 5061 is arriving from another partition with its "
                 "locks, try again"):  # fmt: skip
        assert _route.in_move(dlockd._errors.error_of("ERR", "UNAVAILABLE", line))
    assert not _route.in_move(dlockd._errors.error_of(
        "ERR", "UNAVAILABLE", "ERR UNAVAILABLE persistence is down, try again"))


def test_an_unpartitioned_daemon_says_map_0_and_nothing_changes(daemon):
    assert raw(daemon.port, "MAP") == ["OK MAP 0 0"]
    with dlockd.Client(daemon.addr) as c:
        assert not c.partitioned and c.map_epoch == 0 and not c._legs
        with c.lock(FOO, ttl=5) as lease:
            assert lease._client is c
            assert state_of(daemon, FOO) == "held"
        assert c.status(FOO).held is False


# ---- the sync client ------------------------------------------------------


def test_each_name_is_locked_on_its_partitions_daemon(svc):
    ds = svc.ds
    with dlockd.Client(ds[0].addr) as c:
        assert c.partitioned and c.map_epoch >= svc.epoch
        for name, i in ((BAR, 0), (QUX, 1), (FOO, 2)):
            lease = c.lock(name, ttl=5)
            want = ["moved"] * NPARTS
            want[i] = "held"
            assert where(ds, name) == want, name
            # the lease works through the client of its partition
            assert 4 < lease.check() <= 5
            assert 1.5 < lease.refresh(2) <= 2
            st = c.status(name)
            assert st.held and st.token == lease.token and st.owner == c.owner
            assert c.check(name, lease.token) > 0
            assert [h.token for h in c.holders(name).holders] == [lease.token]
            with pytest.raises(dlockd.LockTimeout):
                with dlockd.Client(ds[0].addr) as other:
                    other.lock(name, wait=0)
            lease.release()
            assert where(ds, name)[i] == "free"
        # one owner everywhere; a client per partition, made on first use
        assert sorted(c._legs) == ["p0", "p1", "p2"]
        assert {leg.owner for leg in c._legs.values()} == {c.owner}
        # a second lease of a name is the same leg's: the turns hold
        with c.lock(QUX, ttl=5, wait=0) as lease:
            with pytest.raises(dlockd.LockTimeout):
                c.lock(QUX, ttl=5, wait=0)
            assert lease.valid
        # calls without a name stay on the first connection (p0's)
        c.ping()
        assert "grants" in c.stats()
    for name, i in ((BAR, 0), (QUX, 1), (FOO, 2)):
        assert where(ds, name)[i] == "free"


def test_a_lease_is_renewed_and_given_back_at_close_by_its_partition(svc):
    ds = svc.ds
    c = dlockd.Client(ds[0].addr)
    lease = c.lock(QUX, ttl=0.6)
    # renewed every TTL/3 through p1's daemon
    assert not lease.lost.wait(1.5) and lease.valid
    assert where(ds, QUX)[1] == "held"
    c.close()
    assert lease.lost.is_set()
    assert where(ds, QUX)[1] == "free"


def test_a_multi_lock_under_one_tag_is_granted_on_its_partition(svc):
    ds = svc.ds
    names = ["{qux}a", "{qux}b"]
    with dlockd.Client(ds[0].addr) as c:
        with c.lock_all(names, ttl=5) as leases:
            assert len(set(leases.tokens)) == 2
            for n in names:
                assert where(ds, n) == ["moved", "held", "moved"]
        for n in names:
            assert where(ds, n)[1] == "free"
        with pytest.raises(dlockd.DlockError) as e:
            c.lock_all([BAR, FOO], ttl=5)
        assert e.value.code == "BAD_ARG" and "several partitions" in str(e.value)
        assert where(ds, BAR)[0] == "free" and where(ds, FOO)[2] == "free"


def test_moved_is_followed_after_the_map_changes(svc):
    ds = svc.ds
    with dlockd.Client(ds[0].addr) as c:
        old = c.map_epoch
        with c.lock(FOO, ttl=5) as lease:  # through p2's daemon
            before = lease.token
        assert where(ds, FOO)[2] == "free"
        e = move(ds, str(_route.slot(FOO)), 2, 1)  # foo is held by nobody
        try:
            assert c.map_epoch == old  # nothing polls
            with c.lock(FOO, ttl=5) as lease:
                # p2 said MOVED with a newer epoch: the map was read again
                assert c.map_epoch >= e
                assert where(ds, FOO) == ["moved", "held", "moved"]
                assert lease.token > before  # the receiver's tokens stay above
                assert c.status(FOO).token == lease.token
            # a client that reads the new map first goes straight there
            with dlockd.Client(ds[0].addr) as fresh, fresh.lock(FOO, ttl=5):
                assert where(ds, FOO)[1] == "held"
        finally:
            move(ds, str(_route.slot(FOO)), 1, 2)  # as it was, for the others


def test_a_watch_of_a_name_is_its_partitions(svc):
    ds = svc.ds
    with dlockd.Client(ds[0].addr) as c, dlockd.Client(ds[0].addr) as o:
        with c.watch(QUX) as w:
            assert "p1" in c._legs and w._c is c._legs["p1"]
            with o.lock(QUX, ttl=5):
                ev = w.get(5)
                assert ev is not None and ev.name == QUX and ev.what == "granted"
        # names of two partitions and a prefix (the first connection's,
        # p0's names only): a watch on each daemon, read as one
        jobs = _name_in(0, 5460, set())  # a name of p0
        with c.watch(QUX, FOO, jobs[:2] + "*") as w:
            assert sorted(w.patterns) == sorted([QUX, FOO, jobs[:2] + "*"])
            for n in (FOO, QUX, jobs):
                o.lock(n, ttl=5).release()
            seen = set()
            while len(seen) < 6:
                ev = w.get(5)
                assert ev is not None, seen
                seen.add((ev.name, ev.what))
            assert seen == {(n, what) for n in (FOO, QUX, jobs)
                            for what in ("granted", "released")}  # fmt: skip
            assert w.get(0.2) is None
        assert w.closed


# ---- leases carried by a PARTITION MOVE (issue 35) -------------------------
#
# The server moves the slot's locks with it: each lease keeps its token at
# the receiving partition, each waiter its place. The client follows: the
# lease's renewal, refresh, check or release answered MOVED moves it to
# the new partition's client; a LOCK that waited there is answered
# "* MOVED" and sent on with the wait it has left and the same req=.


def test_a_lease_survives_a_move_of_its_slot(svc):
    ds = svc.ds
    tag = MOVE_SYNC
    s = _route.slot(tag)
    renewed, manual, unlocked = tag + "renewed", tag + "manual", tag + "unlock"
    lost: list[str] = []
    with dlockd.Client(ds[0].addr) as c, dlockd.Client(ds[0].addr) as other:
        # renewed by the client (TTL 2 s); two more not renewed, long
        # enough to last the test: their first request after the move is
        # the caller's (a refresh, a release), answered MOVED
        lease = c.lock(renewed, ttl=4, on_lost=lambda lz, why: lost.append(str(why)))
        held = c.lock(manual, ttl=30, renew=False)
        gone = c.lock(unlocked, ttl=30, renew=False)
        tokens = (lease.token, held.token, gone.token)
        assert lease._client is c._legs["p0"]
        for n in (renewed, manual, unlocked):
            assert where(ds, n) == ["held", "moved", "moved"], n
        move(ds, str(s), 0, 1)  # while they are held
        try:
            for n in (renewed, manual, unlocked):
                assert settled(ds, n, ["moved", "held", "moved"]), (n, where(ds, n))
            # an UNLOCK answered MOVED is sent again where the lease went
            gone.release()
            assert not gone.valid and where(ds, unlocked)[1] == "free"
            # a refresh answered MOVED too (the lease follows: same token)
            assert 25 < held.refresh(30) <= 30
            assert held._client is c._legs["p1"] and held.valid
            # the renewed one, well past its TTL: still held, renewed by p1
            time.sleep(8)
            assert lease.valid and not lease.lost.is_set() and not lost
            assert lease._client is c._legs["p1"]
            assert (lease.token, held.token) == tokens[:2]
            assert where(ds, renewed) == ["moved", "held", "moved"]
            st = other.status(renewed)
            assert st.held and st.token == lease.token and st.owner == c.owner
            with pytest.raises(dlockd.LockTimeout) as busy:
                other.lock(renewed, ttl=5, wait=0)  # TRYLOCK: refused
            assert busy.value.code == "BUSY"
            assert 3.5 < lease.refresh() <= 4 and 0 < lease.check() <= 4
            lease.proclaim("here")
            assert other.status(renewed).value == "here"
            lease.release()
            held.release()
            assert where(ds, renewed)[1] == "free" and where(ds, manual)[1] == "free"
            # the next owner's lease: a larger token
            with other.lock(renewed, ttl=5, wait=0) as after:
                assert after.token > lease.token
                assert where(ds, renewed) == ["moved", "held", "moved"]
        finally:
            move(ds, str(s), 1, 0)


def test_a_waiter_follows_its_name_to_the_new_partition(svc):
    ds = svc.ds
    name = MOVE_WAIT + "job"
    s = _route.slot(name)
    with dlockd.Client(ds[0].addr) as a, dlockd.Client(ds[0].addr) as b:
        held = a.lock(name, ttl=5)
        got: list[object] = []

        def wait_for_it() -> None:
            try:
                got.append(b.lock(name, ttl=5, wait=60))
            except BaseException as e:  # noqa: BLE001 -- the test says it
                got.append(e)

        t = threading.Thread(target=wait_for_it)
        t.start()
        try:
            assert wait_until(lambda: a.holders(name).waiters, 10, 0.02)
            move(ds, str(s), 0, 1)
            # b's LOCK was answered "* MOVED" and sent again to p1, where
            # its place waits (a's lease is there too)
            assert wait_until(
                lambda: any(w.owner == b.owner for w in a.holders(name).waiters), 10, 0.02)
            time.sleep(0.2)
            assert not got, got  # still waiting: a holds it
            assert held.valid
            held.release()  # answered MOVED at p0, sent again to p1
            t.join(15)
            assert not t.is_alive() and len(got) == 1
            lease = got[0]
            assert isinstance(lease, dlockd.Lease), lease
            assert lease.token > held.token and lease.valid
            assert lease._client is b._legs["p1"]
            assert where(ds, name) == ["moved", "held", "moved"]
            lease.release()
        finally:
            t.join(15)
            move(ds, str(s), 1, 0)


def test_a_waiting_multi_lock_follows_its_names(svc):
    ds = svc.ds
    names = [MOVE_MULTI + "a", MOVE_MULTI + "b"]
    s = _route.slot(names[0])
    with dlockd.Client(ds[0].addr) as a, dlockd.Client(ds[0].addr) as b:
        held = a.lock(names[1], ttl=5)
        got: list[object] = []

        def wait_for_them() -> None:
            try:
                got.append(b.lock_all(names, ttl=5, wait=60))
            except BaseException as e:  # noqa: BLE001 -- the test says it
                got.append(e)

        t = threading.Thread(target=wait_for_them)
        t.start()
        try:
            assert wait_until(lambda: a.holders(names[1]).waiters, 10, 0.02)
            move(ds, str(s), 0, 1)
            assert held.valid
            held.release()
            t.join(15)
            assert not t.is_alive() and len(got) == 1
            leases = got[0]
            assert isinstance(leases, dlockd.Leases), leases
            assert leases[names[1]].token > held.token
            for n in names:
                assert where(ds, n) == ["moved", "held", "moved"], n
            leases.release()
        finally:
            t.join(15)
            move(ds, str(s), 1, 0)


def test_a_moved_lease_keeps_its_turn_and_is_given_back_at_close(svc):
    ds = svc.ds
    name, probe, kept = MOVE_TURN + "x", MOVE_TURN + "probe", MOVE_TURN + "kept"
    s = _route.slot(name)
    c = dlockd.Client(ds[0].addr)
    try:
        # TTL 30 s: no renewal within the test, nothing moves the leases
        # but the calls below
        lease = c.lock(name, ttl=30)
        last = c.lock(kept, ttl=30)
        e = move(ds, str(s), 0, 1)
        # the client learns the new map through another name of the slot;
        # its leases are still with p0's client
        c.lock(probe, ttl=5, wait=0).release()
        assert c.map_epoch >= e and lease._client is c._legs["p0"]
        # a second acquire of the name by this client goes to p1's: the
        # lease moves there first, and the acquire waits its turn behind
        # it (rather than being refused as another process's hold)
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(c.lock(name, ttl=5, wait=30)))
        t.start()
        time.sleep(0.5)
        assert not got and lease._client is c._legs["p1"] and lease.valid
        lease.release()
        t.join(15)
        assert len(got) == 1 and isinstance(got[0], dlockd.Lease)
        assert got[0].token > lease.token
        got[0].release()
        # close() gives back a lease whose UNLOCK is answered MOVED at its
        # new partition
        assert last._client is c._legs["p0"] and where(ds, kept)[1] == "held"
    finally:
        c.close()
        try:
            assert last.lost.is_set() and where(ds, kept)[1] == "free"
        finally:
            move(ds, str(s), 1, 0)


def test_async_a_lease_and_a_waiter_follow_a_move(svc):
    ds = svc.ds
    name, other_name = MOVE_ASYNC + "lease", MOVE_ASYNC + "queue"
    s = _route.slot(name)

    async def run() -> None:
        async with dlockd.AsyncClient(ds[0].addr) as c, dlockd.AsyncClient(ds[0].addr) as o:
            lease = await c.lock(name, ttl=4)
            first = await c.lock(other_name, ttl=30, renew=False)
            waiter = asyncio.ensure_future(o.lock(other_name, ttl=5, wait=60))
            assert await asyncio.to_thread(
                wait_until, lambda: raw(ds[0].port, f"STATUS {other_name}")[0].find(
                    " waiters=1 ") > 0, 10, 0.02)  # fmt: skip
            await asyncio.to_thread(move, ds, str(s), 0, 1)
            try:
                await asyncio.sleep(8)  # 2 TTLs: renewed at p1 after the move
                assert lease.valid and not lease.lost.is_set()
                assert lease._client is c._legs["p1"]
                assert where(ds, name) == ["moved", "held", "moved"]
                with pytest.raises(dlockd.LockTimeout):
                    await o.lock(name, ttl=5, wait=0)
                assert 3.5 < await lease.refresh() <= 4
                assert not waiter.done()
                await first.release()  # MOVED at p0, sent again to p1
                second = await asyncio.wait_for(waiter, 15)
                assert second.token > first.token and second._client is o._legs["p1"]
                await second.release()
                await lease.release()
                async with o.lock(name, ttl=5, wait=0) as after:
                    assert after.token > lease.token
            finally:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
                await asyncio.to_thread(move, ds, str(s), 1, 0)

    asyncio.run(run())


# ---- the redirect limit: a daemon that always says MOVED ------------------


class Scripted:
    """A daemon of a partitioned service gone wrong: its map gives every
    slot to partition px (itself), and it answers each request about a
    name NO MOVED px <itself> 1. maps: the epochs its successive MAPs
    say (the last one again after them; 0: OK MAP 0 0, no map read yet)."""

    def __init__(self, maps: tuple[int, ...] = (1,)) -> None:
        self.port = free_port()
        self.ls = socket.create_server(("127.0.0.1", self.port))
        self.ls.settimeout(0.1)
        self.maps = list(maps)
        self.map_reads = 0
        self.moved = 0
        self.stopped = False
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                s, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s: socket.socket) -> None:
        me = f"127.0.0.1:{self.port}"
        with s, s.makefile("rwb") as f:
            for line in f:
                words = line.decode().split()
                tag = next((w for w in words if w.startswith("id=")), "")
                verb = words[0].upper() if words else ""
                if verb == "HELLO":
                    out = [f"OK HELLO version=0.4.0 owner=o key={'0' * 32} role=active "
                           f"cluster={'a' * 32} {tag}"]  # fmt: skip
                elif verb == "MAP":
                    epoch = self.maps[min(self.map_reads, len(self.maps) - 1)]
                    self.map_reads += 1
                    out = [f"OK MAP {epoch} 2 {tag}", f"part px addrs={me} floor=0",
                           "slots px 0-16383"] if epoch else [f"OK MAP 0 0 {tag}"]  # fmt: skip
                elif verb == "PING":
                    out = [f"OK PONG {tag}"]
                else:
                    self.moved += 1
                    out = [f"NO MOVED px {me} 1 {tag}"]
                f.write(("\r\n".join(out) + "\r\n").encode())
                f.flush()

    def stop(self) -> None:
        self.stopped = True
        self.ls.close()
        self.t.join(5)


def test_a_name_moved_too_many_times_is_moved_error():
    d = Scripted()
    try:
        with dlockd.Client(f"127.0.0.1:{d.port}", describe=False) as c:
            assert c.partitioned and c.map_epoch == 1
            with pytest.raises(dlockd.Moved) as e:
                c.lock(FOO, ttl=5, wait=0)
            assert isinstance(e.value, dlockd.Unavailable) and e.value.code == "MOVED"
            assert e.value.partition == "px" and e.value.epoch == 1
            assert e.value.addrs == (f"127.0.0.1:{d.port}",)
            assert d.moved == 1 + _route.MOVED_MAX  # the call, then 3 redirects
            with pytest.raises(dlockd.Moved):
                c.status(BAR)
    finally:
        d.stop()


def test_a_moved_makes_a_client_that_found_no_map_read_it_again():
    # MAP said 0 at the connect, then the daemon says MOVED: MAP is read
    # again (epoch 1 now), the client routes, and the call is redirected
    # within the same bound (the first MOVED counts)
    d = Scripted(maps=(0, 1))
    try:
        with dlockd.Client(f"127.0.0.1:{d.port}", describe=False) as c:
            assert not c.partitioned and c.map_epoch == 0 and d.map_reads == 1
            with pytest.raises(dlockd.Moved) as e:
                c.lock(FOO, ttl=5, wait=0)
            assert e.value.code == "MOVED" and "moved 4 times" in str(e.value)
            assert c.partitioned and c.map_epoch == 1 and d.map_reads == 2
            assert d.moved == 1 + _route.MOVED_MAX
    finally:
        d.stop()
    # a daemon that still says no map: the MOVED is the caller's, as the
    # server said it, and the client stays as it was
    d = Scripted(maps=(0,))
    try:
        with dlockd.Client(f"127.0.0.1:{d.port}", describe=False) as c:
            with pytest.raises(dlockd.Moved) as e:
                c.status(BAR)
            assert (e.value.partition, e.value.epoch) == ("px", 1)
            assert not c.partitioned and d.map_reads == 2 and d.moved == 1
    finally:
        d.stop()


def test_a_client_connected_before_the_map_is_made_routes_after_a_moved():
    # the daemons are partitioned but have no map yet: MAP says 0 0, so
    # the clients connected now find no map ...
    late = Service(mapped=False)
    ds = late.ds
    clients: list[dlockd.Client] = []
    try:
        for _ in range(3):
            clients.append(dlockd.Client(ds[0].addr))
        c, looker, watcher = clients
        assert raw(ds[0].port, "MAP") == ["OK MAP 0 0"]
        assert not c.partitioned and c.map_epoch == 0

        async def run() -> None:
            async with dlockd.AsyncClient(ds[0].addr) as ac:
                assert not ac.partitioned
                # ... then the map is made and the slots moved
                await asyncio.to_thread(late.make_map)
                assert not ac.partitioned
                async with ac.lock(FOO, ttl=5) as lease:  # p0 says MOVED
                    assert ac.partitioned and ac.map_epoch >= late.epoch
                    assert where(ds, FOO) == ["moved", "moved", "held"]
                    assert (await ac.status(FOO)).token == lease.token
                assert where(ds, FOO)[2] == "free"
                assert "p2" in ac._legs

        asyncio.run(run())
        assert not c.partitioned  # nothing polls
        # a name of another partition: MOVED, the map read again, the
        # lock taken on its partition's daemon
        with c.lock(QUX, ttl=5) as lease:
            assert c.partitioned and c.map_epoch >= late.epoch
            assert where(ds, QUX) == ["moved", "held", "moved"]
            assert c.status(QUX).token == lease.token
            assert 1.5 < lease.refresh(2) <= 2
            # a call about a name without a lock, from another such client
            st = looker.status(QUX)
            assert looker.partitioned and st.held and st.token == lease.token
        assert where(ds, QUX)[1] == "free"
        # every partition's names, the first connection's own too
        for name, i in ((BAR, 0), (FOO, 2)):
            with c.lock(name, ttl=5):
                want = ["moved"] * NPARTS
                want[i] = "held"
                assert where(ds, name) == want, name
        assert sorted(c._legs) == ["p0", "p1", "p2"]
        # a watch of a name
        with watcher.watch(FOO) as w:
            assert watcher.partitioned and w._c is watcher._legs["p2"]
            with c.lock(FOO, ttl=5):
                ev = w.get(5)
                assert ev is not None and ev.name == FOO and ev.what == "granted"
    finally:
        for x in clients:
            x.close()
        late.cleanup()


# ---- the asyncio client ---------------------------------------------------


def test_async_each_name_is_locked_on_its_partitions_daemon(svc):
    ds = svc.ds

    async def run() -> None:
        async with dlockd.AsyncClient(ds[0].addr) as c:
            assert c.partitioned and c.map_epoch >= svc.epoch
            for name, i in ((BAR, 0), (QUX, 1), (FOO, 2)):
                lease = await c.lock(name, ttl=5)
                want = ["moved"] * NPARTS
                want[i] = "held"
                assert where(ds, name) == want, name
                assert 4 < await lease.check() <= 5
                assert 1.5 < await lease.refresh(2) <= 2
                assert (await c.status(name)).token == lease.token
                await lease.release()
                assert where(ds, name)[i] == "free"
            async with c.lock_all(["{qux}a", "{qux}b"], ttl=5) as leases:
                assert len(leases) == 2 and where(ds, "{qux}a")[1] == "held"
            with pytest.raises(dlockd.DlockError) as e:
                await c.lock_all([BAR, FOO], ttl=5)
            assert e.value.code == "BAD_ARG"
            async with c.watch(BAR) as w:
                async with c.lock(BAR, ttl=5):
                    ev = await w.get(5)
                    assert ev is not None and ev.name == BAR
            async with c.watch(QUX, FOO) as w:  # two partitions: one watch each
                for n in (QUX, FOO):
                    await (await c.lock(n, ttl=5)).release()
                seen = set()
                while len(seen) < 4:
                    ev = await w.get(5)
                    assert ev is not None, seen
                    seen.add((ev.name, ev.what))
            assert w.closed
            await c.ping()
            assert sorted(c._legs) == ["p0", "p1", "p2"]
            held = await c.lock(FOO, ttl=5)
        # close gave back what the legs held
        assert held.lost.is_set() and where(ds, FOO)[2] == "free"

    asyncio.run(run())


def test_async_moved_is_followed_after_the_map_changes(svc):
    ds = svc.ds
    name = ANOTHER_OF_P2
    s = _route.slot(name)

    async def run() -> None:
        async with dlockd.AsyncClient(ds[0].addr) as c:
            old = c.map_epoch
            async with c.lock(name, ttl=5) as lease:
                before = lease.token
                assert where(ds, name)[2] == "held"
            e = await asyncio.to_thread(move, ds, str(s), 2, 1)
            try:
                assert c.map_epoch == old
                async with c.lock(name, ttl=5) as lease:
                    assert c.map_epoch >= e
                    assert where(ds, name) == ["moved", "held", "moved"]
                    assert lease.token > before
            finally:
                await asyncio.to_thread(move, ds, str(s), 1, 2)

    asyncio.run(run())


def test_async_a_moved_makes_a_client_that_found_no_map_read_it_again():
    d = Scripted(maps=(0, 1))

    async def run() -> None:
        async with dlockd.AsyncClient(f"127.0.0.1:{d.port}", describe=False) as c:
            assert not c.partitioned
            with pytest.raises(dlockd.Moved) as e:
                await c.lock(FOO, ttl=5, wait=0)
            assert "moved 4 times" in str(e.value)
            assert c.partitioned and c.map_epoch == 1 and d.map_reads == 2
            assert d.moved == 1 + _route.MOVED_MAX

    try:
        asyncio.run(run())
    finally:
        d.stop()


def test_async_a_name_moved_too_many_times_is_moved_error():
    d = Scripted()

    async def run() -> None:
        async with dlockd.AsyncClient(f"127.0.0.1:{d.port}", describe=False) as c:
            assert c.partitioned
            with pytest.raises(dlockd.Moved):
                await c.lock(FOO, ttl=5, wait=0)
            assert d.moved == 1 + _route.MOVED_MAX

    try:
        asyncio.run(run())
    finally:
        d.stop()
