# SPDX-License-Identifier: MIT
"""The dlock command's runner of the conformance scenarios
(tests/conformance/scenarios.txt, which says the language), beside the
libraries' runners (tests/test_conformance.c, test_conformance.py, ...).

A scenario's client is an owner id and key of its own, given to every
dlock it runs (--owner id=key); each step is one dlock invocation, its
outcome read from the exit status (dlock(1), EXIT STATUS) and, where one
status stands for several outcomes (75: busy, timed out, held by the
owner, no upgrade), from the message. "lock" is `dlock lock`/`trylock`,
which exits leaving the lease held and unrenewed; "lockall" the same with
several names (`dlock lock a b c`, one "<name> <token>" line each);
"spawn" a `dlock lock` in the background, "join" its exit.
With DL_CONFORMANCE_PARTS=1 the scenarios run on the library runner's
partitioned service (test_conformance.py says it), dlock told p0's daemon
only.

Some steps have no meaning for a command-line client, and a scenario with
one does not apply (skipped, with why, decided from the file's text when
the tests are collected, never from a run):
  valid <L>, lost <L> ...   the state and the on_lost of a library's
                            lease handle; dlock keeps no handle
  contended <L> ...         a library's on_contended and the count its
                            lease handle keeps; dlock keeps no handle
  <c> proclaim <L> <word>   a new value for a held lease (a library's
                            proclaim: REFRESH value=); dlock has no such
                            command (dlock elect says its value once)
  a lock with notify=...    news of waiters (* WAITING) goes to a
                            library's lease handle: a dlock that took the
                            lock has exited, nobody is there to be told
  a renewing client's lease that the scenario keeps past half its
                            TTL (sleeps, and waits expected to run out):
                            dlock lock does not renew
  a cycle expected of a client with owner= and no key
                            its id is kept bound by a `dlock watch` that
                            stays (Run.bind_owner), a connection of the
                            owner that does not wait: the owner is then
                            in no cycle (PROTOCOL.md, Deadlocks)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from typing import Iterator

import pytest

from procs import DLOCKD, Daemon, Redis
from test_conformance import PARTS, Prepared, made_ahead  # the partitioned service, shared
from test_conformance import Run as LibRun  # its daemon steps, shared
from test_conformance import opts, scenarios, tag_lines, tag_of  # the file's reading, shared

DLOCK = os.environ.get("DLOCK", os.path.join(os.path.dirname(DLOCKD), "dlock"))
STATUS_POLL = 2.0  # s: a status step is polled this long
CMD_TIMEOUT = 30.0  # s: no dlock of a scenario runs longer

# exit statuses of dlock(1)
EX_OK, EX_REFUSED, EX_MISMATCH, EX_UNAVAILABLE = 0, 1, 65, 69
EX_TEMPFAIL, EX_NOPERM, EX_DEADLOCK = 75, 77, 79


# ---- which scenarios apply (static: from the text only) -------------------

NO_CLI_STEP = {
    "valid": "'valid <L>' asks a library's lease handle; dlock keeps none",
    "lost": "'lost <L>' waits for a library's on_lost; dlock keeps no lease "
            "handle (dlock lock leaves the lease unrenewed by design)",
    "contended": "'contended <L>' waits for a library's on_contended and asks "
                 "its lease handle; dlock keeps none",
}
# verbs of a client (<c> <verb> ...) that dlock has no command for
NO_CLI_VERB = {
    "proclaim": "'proclaim <L>' gives a held lease a new value (a library's "
                "proclaim, REFRESH value=); dlock has no command for it",
}
# lock options whose effect goes to a library's lease handle
NO_CLI_OPTION = {
    "notify": "'notify=' asks for news of waiters (* WAITING), told to a "
              "library's lease handle; dlock lock exits once granted",
}


def not_applicable(lines: list[tuple[int, str]]) -> str | None:
    """Why the scenario cannot be run by a command-line client, or None."""
    why: list[str] = []
    bound: set[str] = set()  # clients kept present by a dlock watch
    for no, text in lines:
        words = text.split()
        head = words[0]
        o = opts(text.partition(" -> ")[0].split())
        if head == "client" and "owner" in o and "key" not in o:
            bound.add(words[1])
        want = text.partition(" -> ")[2].split()
        if want[:1] == ["cycle"] and bound:
            why.append(f"line {no}: a cycle of owners kept present by a "
                       f"`dlock watch` ({', '.join(sorted(bound))}), which does "
                       f"not wait: such an owner is in no cycle")
        if head in NO_CLI_STEP:
            why.append(f"line {no}: {NO_CLI_STEP[head]}")
        if len(words) > 1 and words[1] in NO_CLI_VERB:
            why.append(f"line {no}: {NO_CLI_VERB[words[1]]}")
        for k in opts(text.partition(" -> ")[0].split()):
            if k in NO_CLI_OPTION:
                why.append(f"line {no}: {NO_CLI_OPTION[k]}")
    # a lease of a renewing client, kept past half its TTL (the other half
    # a margin for the steps' own time: dlock's, a daemon's restart): the
    # library renews it, dlock lock does not. Time is the sleeps, and the
    # waits that are expected to run out, between its grant and its last
    # mention.
    renewing: dict[str, bool] = {}
    grants: dict[str, tuple[int, int, str]] = {}  # L -> (index, ttl, client)
    spent: list[int] = []  # ms spent by step i
    jobs: dict[str, tuple[str, int]] = {}  # job -> (client, ttl)
    last: dict[str, int] = {}
    for i, (_, text) in enumerate(lines):
        left, _, right = text.partition(" -> ")
        w, want = left.split(), right.split()
        o = opts(w)
        ms = 0
        if w[0] == "sleep":
            ms = int(w[1])
        elif w[0] == "client":
            renewing[w[1]] = o.get("renew") != "0"
        elif len(w) > 1 and w[1] == "lock" and want[:1] == ["timeout"]:
            ms = int(o.get("wait", "0")) if o.get("wait") != "inf" else 0
        spent.append(ms)
        if len(w) > 1 and w[1] == "spawn":
            jobs[w[2]] = (w[0], int(o.get("ttl", "30000")))
        if want[:1] == ["granted"] and len(want) > 1:
            if w[0] == "join":
                c, ttl = jobs.get(w[1], ("", 30000))
            else:
                c, ttl = w[0], int(o.get("ttl", "30000"))
            grants[want[1]] = (i, ttl, c)
        for word in w:
            if word in grants:
                last[word] = i
    for lv, (i, ttl, c) in grants.items():
        kept = sum(spent[i + 1:last.get(lv, i) + 1])
        if renewing.get(c, True) and 2 * kept >= ttl:
            why.append(f"{lv} (ttl {ttl} ms) is kept {kept} ms unrenewed: the "
                       f"library renews it, dlock lock does not")
    return "; ".join(why) if why else None


def params() -> list:  # type: ignore[type-arg]
    out = []
    for index, (name, lines) in enumerate(scenarios()):
        why = not_applicable(lines)
        marks = [pytest.mark.skip(reason=f"does not apply to the CLI: {why}")] if why else []
        out.append(pytest.param(index, name, lines, id=name, marks=marks))
    return out


# ---- a run ----------------------------------------------------------------


class Client:
    """A scenario's client to dlock: an owner id and key."""

    def __init__(self, name: str, o: dict[str, str]) -> None:
        self.name = name
        self.owner = o.get("owner") or f"cf-{name}-{secrets.token_hex(4)}"
        # the library's client is given its key by the server when it
        # connects; a dlock per step needs one that lasts: one of ours
        self.key = o.get("key") or secrets.token_urlsafe(24)
        if o.get("expect") == "denied" and "key" not in o:
            self.key = ""  # the scenario's point: the id without its key

    @property
    def owner_arg(self) -> str:
        return f"{self.owner}={self.key}" if self.key else self.owner


class Done:
    """One dlock's exit: status, output, and its command line."""

    def __init__(self, argv: list[str], rc: int, out: str, err: str) -> None:
        self.argv, self.rc, self.out, self.err = argv, rc, out, err

    def __str__(self) -> str:
        return f"`{' '.join(self.argv[1:])}` exit {self.rc}: {self.err.strip()!r}"


class Run:
    def __init__(self, name: str, lines: list[tuple[int, str]], tag: str = "") -> None:
        self.name = name
        self.no = 0
        self.lock_of = lock_names(lines)  # lease variable -> its lock
        self.tag = tag  # the names' tag (in lines): on the partitioned service
        self.d: Daemon | None = None  # p0's on the partitioned service
        self.dp: list[Daemon] = []  # p1's and p2's
        self.r: Redis | None = None
        self.env: dict[str, str] = {}
        self.clients: dict[str, Client] = {}
        self.tokens: dict[str, int] = {}
        self.jobs: dict[str, subprocess.Popen[str]] = {}
        self.job_names: dict[str, list[str]] = {}  # a lockall job's names
        self.present: list[subprocess.Popen[str]] = []

    def fail(self, what: str) -> None:
        pytest.fail(f"{self.name}, line {self.no}: {what}", pytrace=False)

    def argv(self, c: Client | None, *args: str) -> list[str]:
        a = [DLOCK, *args]
        if c is not None:
            a += ["--owner", c.owner_arg]
        return a

    def dlock(self, c: Client | None, *args: str) -> Done:
        a = self.argv(c, *args)
        try:
            p = subprocess.run(a, env=self.env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"`{' '.join(a[1:])}` did not end in {CMD_TIMEOUT} s")
        return Done(a, p.returncode, p.stdout, p.stderr)

    # ---- steps ---------------------------------------------------------

    def daemon(self, what: str) -> None:
        # the daemon steps as the library runner takes them (its self.d,
        # self.r and fail()), then this runner's dlock environment
        LibRun.daemon(self, what)  # type: ignore[arg-type]
        if what in ("none", "redis"):
            self.env = {k: v for k, v in os.environ.items() if not k.startswith("DLOCK_")}
            self.env.update(DLOCK_HOST="127.0.0.1", DLOCK_PORT=str(self.d.port))

    def client(self, words: list[str]) -> None:
        o = opts(words)
        c = Client(words[1], o)
        if o.get("expect") == "denied":
            # its first command: refused before anything is done
            d = self.dlock(c, "status", "conformance-probe")
            if d.rc != EX_NOPERM:
                self.fail(f"connect: {d}, expected denied (exit {EX_NOPERM})")
            return
        if "owner" in o and "key" not in o:
            # A library's client holds its owner id (bound to the key the
            # server made) while connected; dlock lock connects only for a
            # step. Keep the id bound as long: a dlock that stays.
            self.present.append(self.bind_owner(c))
        self.clients[words[1]] = c

    def lock_args(self, words: list[str]) -> list[str]:
        """`<name> [ttl=] [wait=] [mode=] [limit=] [value=]` as dlock's
        arguments."""
        o = opts(words)
        wait = o.get("wait")
        # lockall's "a,b,c": several names, one dlock lock
        a = ["trylock" if wait == "0" else "lock", *words[0].split(",")]
        if "ttl" in o:
            a += ["--ttl", f"{int(o['ttl'])}ms"]
        if wait is not None and wait != "0":
            a += ["--wait", "inf" if wait == "inf" else f"{int(wait)}ms"]
        if o.get("mode") == "shared":
            a.append("--shared")
        elif "mode" in o:
            self.fail(f"mode={o['mode']}: dlock has no such mode")
        if "limit" in o:
            a += ["--limit", o["limit"]]
        if "value" in o:
            a += ["--value", o["value"]]
        for k in NO_CLI_OPTION:
            if k in o:  # not_applicable() skips these scenarios
                self.fail(f"{k}={o[k]}: {NO_CLI_OPTION[k]}")
        return a

    def bind_owner(self, c: Client) -> subprocess.Popen[str]:
        """A `dlock watch` as c's owner, running until the scenario ends,
        once it holds the id: a dlock giving the id without its key is
        then refused. (The probe that says so holds the id for a moment
        itself: a watch that came then, refused, is started again.)"""
        probe = Client("probe", {"owner": c.owner, "expect": "denied"})
        end = time.monotonic() + 5
        p: subprocess.Popen[str] | None = None
        while time.monotonic() < end:
            if p is None or p.poll() == EX_NOPERM:
                p = subprocess.Popen(self.argv(c, "watch", f"conformance-presence-{c.name}"),
                                     env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
            elif p.poll() is not None:
                self.fail(f"dlock watch as {c.owner} exited {p.returncode}: "
                          f"{p.stderr.read().strip()!r}")  # type: ignore[union-attr]
            time.sleep(0.02)
            if (self.dlock(probe, "status", "conformance-probe").rc == EX_NOPERM
                    and p.poll() is None):
                return p
        if p is not None:
            p.kill()
            p.communicate()
        self.fail(f"no dlock watch holds the owner id {c.owner}")
        raise AssertionError  # not reached

    @staticmethod
    def lock_word(d: Done) -> str:
        if d.rc == EX_OK:
            return "granted"
        if d.rc == EX_TEMPFAIL:
            if "timed out waiting for" in d.err:
                return "timeout"
            if "is already held by owner" in d.err:
                return "heldbyowner"
            if "holds it shared" in d.err and "would wait for itself" in d.err:
                return "deadlock"
            if re.search(r" is held by | is in its lock-delay ", d.err):
                return "busy"
            return "75 with an unknown message"
        return {EX_MISMATCH: "mismatch", EX_DEADLOCK: "cycle", EX_NOPERM: "denied",
                EX_UNAVAILABLE: "unavailable"}.get(d.rc, f"exit {d.rc}")

    def lock_outcome(self, d: Done, want: list[str],
                     names: list[str] | None = None) -> None:
        got = self.lock_word(d)
        if names is not None and got == "granted":
            got = "all"
        if got != want[0]:
            self.fail(f"lock: {got} ({d}), expected {want[0]}")
        if got == "all":
            # "<name> <token>" lines; the leases bound in byte order
            lines = dict(line.split() for line in d.out.splitlines())
            if sorted(lines) != sorted(names or []) or len(want) != len(lines) + 1:
                self.fail(f"lockall: printed {d.out!r}, expected {names}")
            for lv, name in zip(want[1:], sorted(names or [])):
                self.tokens[lv] = int(lines[name])
        if got == "granted":
            lines = d.out.split()
            if len(lines) != 1 or not lines[0].isdigit():
                self.fail(f"lock: granted but printed {d.out!r}, not one token")
            self.tokens[want[1]] = int(lines[0])
        if got == "cycle":
            m = re.search(r"a cycle of (\d+) owners", d.err)
            if len(want) < 2 or m is None or m.group(1) != want[1]:
                self.fail(f"cycle: {d.err.strip()!r}, expected {want[1:]} owners")

    def verb(self, c: Client, words: list[str], want: list[str]) -> None:
        verb = words[1]
        if verb == "lock":
            self.lock_outcome(self.dlock(c, *self.lock_args(words[2:])), want)
        elif verb == "lockall":
            self.lock_outcome(self.dlock(c, *self.lock_args(words[2:])), want,
                              words[2].split(","))
        elif verb == "spawn":
            if words[3] == "lockall":
                self.job_names[words[2]] = words[4].split(",")
            a = self.argv(c, *self.lock_args(words[4:]))
            self.jobs[words[2]] = subprocess.Popen(
                a, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        elif verb in ("release", "refresh"):
            a = ["unlock" if verb == "release" else "refresh",
                 self.lock_of[words[2]], str(self.tokens[words[2]])]
            o = opts(words)
            if "ttl" in o:
                a += ["--ttl", f"{int(o['ttl'])}ms"]
            d = self.dlock(c, *a)
            got = {EX_OK: "ok", EX_REFUSED: "notholder" if verb == "release" else "lost"}
            if got.get(d.rc, str(d)) != want[0]:
                self.fail(f"{verb}: {got.get(d.rc, str(d))} ({d}), expected {want[0]}")
        elif verb in NO_CLI_VERB:  # not_applicable() skips these scenarios
            self.fail(NO_CLI_VERB[verb])
        elif verb in ("check", "break"):
            a = [verb, words[2], str(self.tokens[words[3]])]
            if verb == "break":
                a += ["--reason", "conformance"]
            d = self.dlock(c, *a)
            got = {EX_OK: "valid" if verb == "check" else "ok", EX_REFUSED: "stale"}
            if got.get(d.rc, str(d)) != want[0]:
                self.fail(f"{verb}: {got.get(d.rc, str(d))} ({d}), expected {want[0]}")
        elif verb == "status":
            end = time.monotonic() + STATUS_POLL
            while True:
                d = self.dlock(c, "status", words[2], "--json")
                if d.rc != EX_OK:
                    self.fail(f"status: {d}")
                try:
                    st = json.loads(d.out)
                except ValueError:
                    self.fail(f"status --json printed {d.out!r}")
                if self.status_matches(st, want):
                    break
                if time.monotonic() > end:
                    self.fail(f"status: {d.out.strip()}, expected {' '.join(want)}")
                time.sleep(0.02)
        else:
            self.fail(f"unknown verb {verb}")

    def status_matches(self, st: dict, want: list[str]) -> bool:  # type: ignore[type-arg]
        if want[0] != st.get("state"):
            return False
        for w in want[1:]:
            k, eq, v = w.partition("=")
            if not eq:
                if int(st.get("token") or 0) != self.tokens[w]:
                    return False
            elif k == "value":
                # the first holder's value, decoded (--json; the text
                # output's "value=" line says it encoded); absent: none
                if (st.get("value") or "") != v:
                    return False
            elif str(st.get(k)) != v:
                return False
        return True

    def line(self, text: str) -> None:
        left, _, right = text.partition(" -> ")
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
        elif head == "order":
            if not self.tokens[words[1]] < self.tokens[words[3]]:
                self.fail(f"{words[1]}'s token {self.tokens[words[1]]} is not below "
                          f"{words[3]}'s {self.tokens[words[3]]}")
        elif head == "join":
            p = self.jobs.pop(words[1])
            try:
                out, err = p.communicate(timeout=CMD_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                self.fail(f"job {words[1]} did not end in {CMD_TIMEOUT} s")
            self.lock_outcome(Done(p.args, p.returncode, out, err), want,  # type: ignore[arg-type]
                              self.job_names.get(words[1]))
        elif head in self.clients:
            self.verb(self.clients[head], words, want)
        else:
            self.fail(f"no client or step {head}")

    def close(self) -> None:
        for p in [*self.jobs.values(), *self.present]:
            if p.poll() is None:
                p.kill()
            p.communicate()
        for d in (self.d, *self.dp):
            if d is not None:
                d.cleanup()
        if self.r is not None:
            self.r.cleanup()


@pytest.fixture(scope="module")
def prepared(request: pytest.FixtureRequest) -> Iterator[Prepared]:
    yield from made_ahead(request)


def lock_names(lines: list[tuple[int, str]]) -> dict[str, str]:
    """Each lease variable's lock name, from the step that grants it."""
    out: dict[str, str] = {}
    jobs: dict[str, str] = {}
    for _, text in lines:
        left, _, right = text.partition(" -> ")
        w, want = left.split(), right.split()
        if len(w) > 3 and w[1] == "spawn":
            jobs[w[2]] = w[4]
        if want[:1] == ["granted"] and len(want) > 1:
            out[want[1]] = jobs.get(w[1], "") if w[0] == "join" else w[2]
        if want[:1] == ["all"]:  # lockall: bound in byte order of the names
            names = jobs.get(w[1], "") if w[0] == "join" else w[2]
            out.update(zip(want[1:], sorted(names.split(","))))
    return out


@pytest.mark.parametrize("index,name,lines", params())
def test_conformance_cli(index: int, name: str, lines: list[tuple[int, str]],
                         prepared: Prepared) -> None:
    if not (os.path.isfile(DLOCK) and os.access(DLOCK, os.X_OK)):
        pytest.fail(f"no dlock at {DLOCK} (set DLOCK, or build it next to DLOCKD)",
                    pytrace=False)
    # with DL_CONFORMANCE_PARTS=1, on the partitioned service (as the
    # library runner's), its names under the scenario's tag
    tag = tag_of(index) if PARTS else ""
    if tag:
        lines = tag_lines(lines, tag)
    run = Run(name, lines, tag)
    try:
        for no, text in lines:
            run.no = no
            run.line(text)
    finally:
        run.close()
