# SPDX-License-Identifier: MIT
"""The Python client's runner of the conformance scenarios
(tests/conformance/scenarios.txt, which says the language); libdlock runs
the same file (tests/test_conformance.c). One test per scenario, on
dlockd.Client; a step whose outcome differs fails with the scenario's
name, its line and what was seen.

With DL_CONFORMANCE_PARTS=1 (as libdlock's test_conformance.parts) every
scenario runs on a partitioned service instead: a redis-server and three
daemons of partitions p0, p1 and p2, the map giving p0 the slots below
5461, p1 those below 10923, p2 the rest. The clients know p0's daemon
only, and every name of a scenario is put under one tag "{c<k>}" whose
slot is p1's (even scenario index) or p2's (odd): each of its calls goes
through the map and NO MOVED to the partition that serves it, and a
multi-lock's names share it. "daemon none" starts the same service
(partitions need Redis); "daemon kill9", "restart", "pause" and "resume"
act on every daemon. The services are made ahead, PARTS_AHEAD at a time
(Prepared): a scenario starts on one whose map every daemon serves.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

import dlockd
from dlockd import LostReason
from dlockd._route import slot
from procs import TOP, Daemon, Redis, boottime

FILE = os.environ.get(
    "DL_CONFORMANCE", os.path.join(TOP, "tests", "conformance", "scenarios.txt")
)
STATUS_POLL = 2.0  # s: a status step is polled this long

# The partitioned service (DL_CONFORMANCE_PARTS=1)
PARTS = os.environ.get("DL_CONFORMANCE_PARTS") == "1"
NPARTS = 3
PART_CONF = "[persistence]\nredis_prefix = c:\n[partition]\nid = p{i}\n"
MOVES = ((5461, 10922, 1), (10923, 16383, 2))  # made on p0, after INIT
PARTS_AHEAD = 3  # services made ahead of the scenarios (Prepared)
SETTLE = 15.0  # s: a daemon shows the map (or a name's partition) within this


def scenarios() -> list[tuple[str, list[tuple[int, str]]]]:
    out: list[tuple[str, list[tuple[int, str]]]] = []
    with open(FILE) as f:
        for no, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("scenario "):
                out.append((line.split()[1], []))
            out[-1][1].append((no, line))
    return out


def opts(words: list[str]) -> dict[str, str]:
    return dict(w.split("=", 1) for w in words if "=" in w)


# ---- the partitioned service ------------------------------------------------


def tag_of(index: int) -> str:
    """The tag "{c<k>}" of scenario `index`'s names: the first k whose
    slot is p1's (even index) or p2's (odd)."""
    lo, hi, _ = MOVES[index % 2]
    k = 0
    while not lo <= slot(f"c{k}") <= hi:
        k += 1
    return f"{{c{k}}}"


NAME_VERBS = ("lock", "lockall", "status", "check", "break")


def tag_lines(lines: list[tuple[int, str]], tag: str) -> list[tuple[int, str]]:
    """The scenario with each name under `tag` (each of a lockall's
    list too): the words that are names, <c> lock|lockall|status|check|
    break <name> and <c> spawn <job> lock|lockall <name>."""
    out = []
    for no, text in lines:
        left, arrow, right = text.partition(" -> ")
        w = left.split()
        at = 4 if len(w) >= 5 and w[1] == "spawn" else \
            2 if len(w) >= 3 and w[1] in NAME_VERBS else 0
        if at:
            w[at] = ",".join(tag + n for n in w[at].split(","))
            text = " ".join(w) + arrow + right
        out.append((no, text))
    return out


def call(port: int, line: str) -> list[str]:
    """One request on a connection of its own: the reply's lines (a MAP's
    with its body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rwb")
        f.write(line.encode() + b"\r\n")
        f.flush()
        out = [f.readline().decode().rstrip("\r\n")]
        w = out[0].split()
        if out[0].startswith("OK MAP ") and len(w) > 3:
            out += [f.readline().decode().rstrip("\r\n") for _ in range(int(w[3]))]
        return out


def polled(port: int, line: str, good: Callable[[list[str]], bool], what: str) -> None:
    """`line` asked every 20 ms until good(its reply), for SETTLE seconds;
    then RuntimeError with `what` and the last reply."""
    end = time.monotonic() + SETTLE
    while True:
        got = call(port, line)
        if good(got):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: {line}: {got!r}")
        time.sleep(0.02)


class Parts:
    """A partitioned service: a redis-server (appendfsync always) and
    the daemons of p0, p1, p2 on it; the map made on p0 (PARTITION INIT,
    each of p1 and p2 moved its slots once its daemon is in the map) and
    read by every daemon."""

    def __init__(self) -> None:
        self.r = Redis("always")
        self.ds: list[Daemon] = []
        try:
            for i in range(NPARTS):
                self.ds.append(Daemon("--persist", "redis", "--redis", self.r.url,
                                      conf=PART_CONF.format(i=i)))
                self.ds[-1].start()
            self.make_map()
        except BaseException:
            self.cleanup()
            raise

    def make_map(self) -> None:
        p0 = self.ds[0].port
        got = call(p0, "PARTITION INIT")[0]
        if got != "OK PARTITION epoch=1":
            raise RuntimeError(f"PARTITION INIT: {got!r}")
        epoch = 1
        for lo, hi, i in MOVES:
            # its daemon puts it in the map within a second
            polled(p0, "MAP", lambda m, i=i: any(x.startswith(f"part p{i} ") for x in m[1:]),
                   f"p{i} not in p0's map")
            got = call(p0, f"PARTITION MOVE {lo}-{hi} p{i}")[0]
            if not got.startswith("OK PARTITION epoch="):
                raise RuntimeError(f"PARTITION MOVE {lo}-{hi} p{i}: {got!r}")
            epoch = int(got.split()[2].split("=")[1])
        for i, d in enumerate(self.ds):  # each reads the map every second
            polled(d.port, "MAP", lambda m: int(m[0].split()[2]) >= epoch,
                   f"p{i}'s map, not epoch {epoch}")

    def probe(self, tag: str) -> None:
        """Until the tag's partition answers OK STATUS and the others NO
        MOVED (RuntimeError)."""
        target = next(i for lo, hi, i in MOVES if lo <= slot(tag) <= hi)
        for i, d in enumerate(self.ds):
            want = "OK STATUS" if i == target else "NO MOVED"
            polled(d.port, f"STATUS {tag}probe", lambda a: a[0].startswith(want),
                   f"p{i}, not {want}")

    def cleanup(self) -> None:
        for d in self.ds:
            d.cleanup()
        self.r.cleanup()


class Prepared:
    """Partitioned services made ahead, on threads of their own: at most
    PARTS_AHEAD ready or on their way, and no more than the scenarios
    left will take (expect()). A service takes seconds to make (each
    daemon reads the map once a second); a scenario often less."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.ready: list[Parts | BaseException] = []
        self.making = 0
        self.left = 0  # services the scenarios still take
        self.threads: list[threading.Thread] = []

    def _more(self) -> None:  # with cv held
        while self.making + len(self.ready) < min(PARTS_AHEAD, self.left):
            self.making += 1
            t = threading.Thread(target=self._make, daemon=True)
            self.threads.append(t)
            t.start()

    def _make(self) -> None:
        try:
            p: Parts | BaseException = Parts()
        except BaseException as e:  # told to the scenario that takes it
            p = e
        with self.cv:
            self.making -= 1
            self.ready.append(p)
            self.cv.notify_all()

    def expect(self, n: int) -> None:
        with self.cv:
            self.left = n
            self._more()

    def take(self) -> Parts:
        with self.cv:
            self.left = max(self.left, 1)
            self._more()
            if not self.cv.wait_for(lambda: self.ready, timeout=120):
                raise RuntimeError("no partitioned service made in 120 s")
            p = self.ready.pop(0)
            self.left -= 1
            self._more()
        if isinstance(p, BaseException):
            raise p
        return p

    def close(self) -> None:
        with self.cv:
            self.left = 0
        for t in self.threads:
            t.join()
        for p in self.ready:
            if isinstance(p, Parts):
                p.cleanup()
        self.ready, self.threads = [], []


PREPARED = Prepared()


def made_ahead(request: pytest.FixtureRequest) -> Iterator[Prepared]:
    """A module's fixture: PREPARED, told how many of the module's
    scenarios run (not skipped), closed after them."""
    if PARTS:
        PREPARED.expect(sum(1 for it in request.session.items
                            if it.module is request.module
                            and it.get_closest_marker("skip") is None))
    yield PREPARED
    PREPARED.close()


@pytest.fixture(scope="module")
def prepared(request: pytest.FixtureRequest) -> Iterator[Prepared]:
    yield from made_ahead(request)


class Var:
    """A lease variable: the handle, its token, what on_lost saw."""

    def __init__(self, lease: dlockd.Lease) -> None:
        self.lease = lease
        self.token = lease.token


class Run:
    def __init__(self, name: str, tag: str = "") -> None:
        self.name = name
        self.no = 0
        self.tag = tag  # the names' tag: on the partitioned service
        self.d: Daemon | None = None  # p0's on the partitioned service
        self.dp: list[Daemon] = []  # p1's and p2's
        self.r: Redis | None = None
        self.clients: dict[str, dlockd.Client] = {}
        self.leases: dict[str, Var] = {}
        self.jobs: dict[str, tuple[threading.Thread, list[Any]]] = {}
        self.lost: dict[int, tuple[LostReason, float, float]] = {}  # id(lease)
        # what on_contended said last, by id(lease): it may come before
        # the scenario binds the lease (a waiter's grant, joined later)
        self.told: dict[int, int] = {}

    def fail(self, what: str) -> None:
        pytest.fail(f"{self.name}, line {self.no}: {what}", pytrace=False)

    def on_lost(self, lease: dlockd.Lease, why: LostReason) -> None:
        self.lost[id(lease)] = (why, boottime(), lease.deadline)

    def on_contended(self, lease: dlockd.Lease, waiters: int) -> None:
        self.told[id(lease)] = waiters

    # ---- steps ---------------------------------------------------------

    def daemon(self, what: str) -> None:
        # the dlock runner's too (test_conformance_cli.Run: its d, dp, r,
        # tag and fail())
        if what in ("none", "redis") and self.tag:
            p = PREPARED.take()
            self.r, self.d, self.dp = p.r, p.ds[0], p.ds[1:]
            try:
                p.probe(self.tag)
            except RuntimeError as e:
                self.fail(f"the partitioned service: {e}")
        elif what == "none":
            self.d = Daemon("--persist", "none").start()
        elif what == "redis":
            self.r = Redis("always")
            self.d = Daemon("--persist", "redis", "--redis", self.r.url).start()
        elif what == "kill9":
            for d in (self.d, *self.dp):
                d.kill9()
        elif what == "restart":
            for d in (self.d, *self.dp):
                d.restart()
        elif what in ("pause", "resume"):
            for d in (self.d, *self.dp):
                d.signal(signal.SIGSTOP if what == "pause" else signal.SIGCONT)
        else:
            self.fail(f"unknown daemon step {what}")

    def client(self, words: list[str]) -> None:
        o = opts(words)
        kw: dict[str, Any] = {"on_lost": self.on_lost, "on_contended": self.on_contended}
        if "owner" in o:
            kw["owner"] = o["owner"]
        if "key" in o:
            kw["owner_key"] = o["key"]
        if "renew" in o:
            kw["renew"] = o["renew"] != "0"
        try:
            c = dlockd.Client(self.d.addr, **kw)
        except dlockd.Denied:
            if o.get("expect") == "denied":
                return
            raise
        if o.get("expect") == "denied":
            c.close()
            self.fail("connect: accepted, expected denied")
        self.clients[words[1]] = c

    @staticmethod
    def lock_kw(words: list[str]) -> tuple[str, dict[str, Any]]:
        o = opts(words)
        kw: dict[str, Any] = {}
        if "ttl" in o:
            kw["ttl"] = int(o["ttl"]) / 1000
        if "wait" in o:
            kw["wait"] = None if o["wait"] == "inf" else int(o["wait"]) / 1000
        if "mode" in o:
            kw["mode"] = o["mode"]
        if "limit" in o:
            kw["limit"] = int(o["limit"])
        if o.get("notify") == "waiters":
            kw["notify_waiters"] = True
        if "value" in o:
            kw["value"] = o["value"]
        return words[0], kw

    @staticmethod
    def lock_all_kw(words: list[str]) -> tuple[list[str], dict[str, Any]]:
        """lockall <name>,<name>,... [ttl=<ms>] [wait=<ms>|inf]"""
        _, kw = Run.lock_kw(words)
        return words[0].split(","), kw

    def lock_all_outcome(self, leases: dlockd.Leases | None, err: BaseException | None,
                         want: list[str]) -> None:
        """-> all <L1> <L2> ... (bound in byte order of the names), or
        what lock expects of a lock not got"""
        if err is None and want[0] == "all":
            assert leases is not None
            if len(leases) != len(want) - 1:
                self.fail(f"lockall: {len(leases)} leases, expected {len(want) - 1}")
            for v, lease in zip(want[1:], leases):
                self.leases[v] = Var(lease)
            return
        got = "all" if err is None else self.lock_word(err)
        if got != want[0]:
            self.fail(f"lockall: {got} ({err}), expected {want[0]}")
        if isinstance(err, dlockd.Deadlock) and (len(want) < 2 or err.owners != int(want[1])):
            self.fail(f"cycle: {err.text!r}, expected {want[1:]} owners")

    @staticmethod
    def lock_word(e: BaseException | None) -> str:
        if e is None:
            return "granted"
        if isinstance(e, dlockd.Deadlock):
            return "cycle"
        if isinstance(e, dlockd.HeldByOwner):
            return "heldbyowner"
        if isinstance(e, dlockd.LockTimeout):
            return "busy" if e.code == "BUSY" else "timeout"
        for cls, w in ((dlockd.LimitMismatch, "mismatch"), (dlockd.UpgradeDeadlock, "deadlock"),
                       (dlockd.Denied, "denied"), (dlockd.Unavailable, "unavailable")):
            if isinstance(e, cls):
                return w
        return repr(e)

    def lock_outcome(self, lease: dlockd.Lease | None, err: BaseException | None,
                     want: list[str]) -> None:
        got = self.lock_word(err)
        if got != want[0]:
            self.fail(f"lock: {got} ({err}), expected {want[0]}")
        if lease is not None:
            self.leases[want[1]] = Var(lease)
        if isinstance(err, dlockd.Deadlock) and (len(want) < 2 or err.owners != int(want[1])):
            self.fail(f"cycle: {err.text!r}, expected {want[1:]} owners")

    def verb(self, c: dlockd.Client, words: list[str], want: list[str]) -> None:
        verb = words[1]
        if verb == "lock":
            name, kw = self.lock_kw(words[2:])
            lease, err = None, None
            try:
                lease = c.lock(name, **kw)
            except dlockd.DlockError as e:
                err = e
            self.lock_outcome(lease, err, want)
        elif verb == "lockall":
            names, kw = self.lock_all_kw(words[2:])
            leases, err = None, None
            try:
                leases = c.lock_all(names, **kw)
            except dlockd.DlockError as e:
                err = e
            self.lock_all_outcome(leases, err, want)
        elif verb == "spawn":
            # <c> spawn <job> lock ... | lockall ...; box[2]: which
            many = words[3] == "lockall"
            box: list[Any] = [None, None, many]
            if many:
                names, kw = self.lock_all_kw(words[4:])
            else:
                name, kw = self.lock_kw(words[4:])

            def job() -> None:
                try:
                    box[0] = c.lock_all(names, **kw) if many else c.lock(name, **kw)
                except dlockd.DlockError as e:
                    box[1] = e

            t = threading.Thread(target=job)
            t.start()
            self.jobs[words[2]] = (t, box)
        elif verb == "release":
            got = "ok"
            try:
                self.leases[words[2]].lease.release()
            except dlockd.NotHolder:
                got = "notholder"
            if got != want[0]:
                self.fail(f"release: {got}, expected {want[0]}")
        elif verb == "refresh":
            o = opts(words)
            got = "ok"
            try:
                self.leases[words[2]].lease.refresh(int(o["ttl"]) / 1000 if "ttl" in o else None)
            except dlockd.LockLost:
                got = "lost"
            if got != want[0]:
                self.fail(f"refresh: {got}, expected {want[0]}")
        elif verb == "proclaim":
            # <c> proclaim <L> <word>: the lease's holder gives it a new value
            got = "ok"
            try:
                self.leases[words[2]].lease.proclaim(words[3])
            except dlockd.LockLost:
                got = "lost"
            if got != want[0]:
                self.fail(f"proclaim: {got}, expected {want[0]}")
        elif verb in ("check", "break"):
            tok = self.leases[words[3]].token
            got = "valid" if verb == "check" else "ok"
            try:
                if verb == "check":
                    c.check(words[2], tok)
                else:
                    c.break_lease(words[2], tok, reason="conformance")
            except dlockd.LockLost:
                got = "stale"
            if got != want[0]:
                self.fail(f"{verb}: {got}, expected {want[0]}")
        elif verb == "status":
            end = time.monotonic() + STATUS_POLL
            while True:
                st = c.status(words[2])
                if self.status_matches(st, want):
                    break
                if time.monotonic() > end:
                    self.fail(f"status: {st}")
                time.sleep(0.01)
        else:
            self.fail(f"unknown verb {verb}")

    def status_matches(self, st: dlockd.Status, want: list[str]) -> bool:
        if want[0] != ("held" if st.held else "free"):
            return False
        for w in want[1:]:
            k, eq, v = w.partition("=")
            if not eq:
                if st.token != self.leases[w].token:
                    return False
            elif str(getattr(st, k)) != v:
                return False
        return True

    def lost_step(self, words: list[str]) -> None:
        v = self.leases[words[1]]
        within = int(words[3]) / 1000 if len(words) > 3 and words[2] == "within" else 0
        o = opts(words)
        end = time.monotonic() + within
        while id(v.lease) not in self.lost and time.monotonic() < end:
            time.sleep(0.005)
        if id(v.lease) not in self.lost:
            self.fail(f"{words[1]} not lost within {within} s")
        why, at, deadline = self.lost[id(v.lease)]
        if "reason" in o and why.name.lower() != o["reason"]:
            self.fail(f"{words[1]} lost with reason {why.name}, expected {o['reason']}")
        if at >= deadline:
            self.fail(f"{words[1]}: on_lost at {at}, not before its deadline {deadline}")

    def contended_step(self, words: list[str]) -> None:
        """contended <L> <n> within <ms>: on_contended said n for L, and
        the lease says so too."""
        v = self.leases[words[1]]
        want = int(words[2])
        within = int(words[4]) / 1000 if len(words) > 4 and words[3] == "within" else 0
        end = time.monotonic() + within
        while self.told.get(id(v.lease)) != want and time.monotonic() < end:
            time.sleep(0.005)
        if self.told.get(id(v.lease)) != want:
            self.fail(f"{words[1]}: on_contended said {self.told.get(id(v.lease))}, "
                      f"expected {want} within {within} s")
        if v.lease.waiters != want:
            self.fail(f"{words[1]}: lease.waiters {v.lease.waiters}, expected {want}")

    def line(self, text: str) -> None:
        left, arrow, right = text.partition(" -> ")
        words, want = left.split(), right.split()
        head = words[0]
        if head == "scenario":
            return
        if head == "daemon":
            self.daemon(words[1])
        elif head == "client":
            self.client(words)
        elif head == "sleep":
            time.sleep(int(words[1]) / 1000)
        elif head == "valid":
            if not self.leases[words[1]].lease.valid:
                self.fail(f"{words[1]} is not valid")
        elif head == "lost":
            self.lost_step(words)
        elif head == "contended":
            self.contended_step(words)
        elif head == "order":
            if not self.leases[words[1]].token < self.leases[words[3]].token:
                self.fail(f"{words[1]}'s token is not below {words[3]}'s")
        elif head == "join":
            t, box = self.jobs[words[1]]
            t.join(30)
            if box[2]:
                self.lock_all_outcome(box[0], box[1], want)
            else:
                self.lock_outcome(box[0], box[1], want)
        elif head in self.clients:
            self.verb(self.clients[head], words, want)
        else:
            self.fail(f"no client or step {head}")

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        for d in (self.d, *self.dp):
            if d is not None:
                d.cleanup()
        if self.r is not None:
            self.r.cleanup()


@pytest.mark.parametrize("index,name,lines", [(i, *s) for i, s in enumerate(scenarios())],
                         ids=[s[0] for s in scenarios()])
def test_conformance(index: int, name: str, lines: list[tuple[int, str]],
                     prepared: Prepared) -> None:
    run = Run(name, tag_of(index) if PARTS else "")
    if run.tag:
        lines = tag_lines(lines, run.tag)
    try:
        for no, text in lines:
            run.no = no
            run.line(text)
    finally:
        run.close()
