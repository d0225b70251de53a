# SPDX-License-Identifier: MIT
"""The wire codec: request lines out, reply and event lines in.

No I/O here (the same split as the C codec in ``proto/``): the core feeds
bytes to :class:`LineSplitter` and reads :class:`Reply` values; requests
are formatted by :func:`request`. Limits and value syntaxes are those of
``proto/PROTOCOL.md``.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Union

# A duration: seconds (an int or a float) or a datetime.timedelta.
Seconds = Union[float, datetime.timedelta]

# Limits of the protocol (proto/limits.h).
LINE_MAX = 1024  # a request line, its ending not counted
NAME_MAX = 255  # a lock name
OWNER_MAX = 64  # an owner id
KEY_MIN, KEY_MAX = 16, 64  # an owner key a client brings
REASON_MAX = 128  # BREAK reason=
DESC_HOST_MAX, DESC_CMD_MAX = 64, 128  # HELLO host=, cmd= (bytes as sent)
DESC_PID_MAX = 2147483647  # HELLO pid=
VALUE_MAX = 128  # a lease's value (LOCK, REFRESH value=), bytes as sent
LIMIT_MAX = 1024  # holders of one lock (limit=)
DURATION_MAX_MS = 10**12  # the largest duration the server reads
PAGE_MAX = 1000  # LOCKS limit=
MULTI_MAX = 64  # names of one multi-lock (LOCK <name> <name> ..., DL_MULTI_MAX)
REPLY_LINE_MAX = 65536  # a server line longer than this is not protocol
DEFAULT_PORT = 7420
DEFAULT_TTL_MS = 30000

_PRINTABLE = re.compile(r"[!-~]+\Z")
_USER = re.compile(r"[A-Za-z0-9._-]{1,32}\Z")
_KEY = re.compile(r"[A-Za-z0-9_-]{%d,%d}\Z" % (KEY_MIN, KEY_MAX))


def check_name(name: str, what: str = "lock name") -> str:
    """A lock name: 1-255 printable ASCII bytes, no '='."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= NAME_MAX
        or not _PRINTABLE.match(name)
        or "=" in name
    ):
        raise ValueError(
            f"bad {what} {name!r}: 1-{NAME_MAX} printable ASCII characters, "
            "no space or '='"
        )
    return name


def check_owner(owner: str) -> str:
    if (
        not isinstance(owner, str)
        or not 1 <= len(owner) <= OWNER_MAX
        or not _PRINTABLE.match(owner)
        or "=" in owner
    ):
        raise ValueError(
            f"bad owner id {owner!r}: 1-{OWNER_MAX} printable ASCII "
            "characters, no space or '='"
        )
    return owner


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(
            f"bad owner key: {KEY_MIN} to {KEY_MAX} letters, digits, - or _"
        )
    return key


def check_user(user: str) -> str:
    if not isinstance(user, str) or not _USER.match(user):
        raise ValueError(f"bad user name {user!r}: 1-32 letters, digits, . _ -")
    return user


def check_word(value: str, what: str, maxlen: int) -> str:
    """One word of printable ASCII (a password, a reason)."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= maxlen
        or not _PRINTABLE.match(value)
    ):
        raise ValueError(
            f"bad {what}: 1-{maxlen} printable ASCII characters, no space"
        )
    return value


_HEX = "0123456789ABCDEF"
_HEXDIGITS = "0123456789abcdefABCDEF"


def desc_encode(text: str, maxlen: int) -> str:
    """A text value as it is sent (proto/desc.h; HELLO's host= and cmd=, a
    lease's value=): printable ASCII kept, a space or '%' escaped (%20,
    %25), any other byte of its UTF-8 '?' (one per byte, as libdlock and
    the Go and Java clients do); cut to maxlen bytes, never inside an
    escape."""
    out: list[str] = []
    n = 0
    for ch in text.encode("utf-8", "replace").decode("latin-1"):
        if ch in (" ", "%"):
            e = "%" + _HEX[ord(ch) >> 4] + _HEX[ord(ch) & 15]
        elif "!" <= ch <= "~":
            e = ch
        else:
            e = "?"
        if n + len(e) > maxlen:
            break
        out.append(e)
        n += len(e)
    return "".join(out)


def desc_decode(value: str) -> str:
    """What a text value (a description, a lease's value) says: escapes
    decoded, anything not printable ASCII shown as '?'."""
    out: list[str] = []
    i = 0
    while i < len(value):
        esc = value[i + 1 : i + 3]
        if value[i] == "%" and len(esc) == 2 and all(c in _HEXDIGITS for c in esc):
            v = int(esc, 16)
            if 0x20 <= v <= 0x7E:
                out.append(chr(v))
                i += 3
                continue
        out.append(value[i] if " " <= value[i] <= "~" else "?")
        i += 1
    return "".join(out)


def seconds_of(value: Seconds, what: str) -> float:
    """A duration as seconds: a number, or a ``datetime.timedelta``."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is a number of seconds or a timedelta, not {value!r}")
    return value


def ms_of(seconds: Seconds, what: str, minimum: int = 1) -> int:
    """Seconds (a float, or a ``datetime.timedelta``) as whole
    milliseconds for the wire."""
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} is a number of seconds or a timedelta, not {seconds!r}")
    if seconds != seconds or seconds < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0")
    ms = int(round(seconds * 1000))
    if seconds > 0 and ms == 0:
        ms = 1
    if ms < minimum or ms > DURATION_MAX_MS:
        raise ValueError(
            f"{what} out of range: {seconds} s (at least {minimum} ms, at "
            f"most {DURATION_MAX_MS // 1000} s)"
        )
    return ms


def request(verb: str, *words: str, tag: str = "", **kv: object) -> bytes:
    """One request line: the verb, positional words, key=value options (a
    None value is left out) and the id= tag, ending in CRLF."""
    parts = [verb, *words]
    for k, v in kv.items():
        if v is not None:
            parts.append(f"{k}={v}")
    if tag:
        parts.append(f"id={tag}")
    return (" ".join(parts) + "\r\n").encode("ascii")


@dataclass
class Reply:
    """One line from the server: ``kind`` is OK, NO, ERR or ``*`` (an
    event), ``word`` the second word, ``args`` the words after it (the tag
    taken off), ``tag`` the echoed id= ("" if none)."""

    kind: str
    word: str
    args: list[str] = field(default_factory=list)
    tag: str = ""
    line: str = ""

    def kv(self, key: str) -> str | None:
        """The value of key=<value> among the words, or None."""
        prefix = key + "="
        for a in self.args:
            if a.startswith(prefix):
                return a[len(prefix) :]
        return None

    def int_arg(self, i: int) -> int:
        """args[i] as a non-negative decimal (ValueError if it is not)."""
        v = self.args[i]
        if not v.isdigit():
            raise ValueError(v)
        return int(v)

    def text(self) -> str:
        """The line without its tag: what an error keeps."""
        return " ".join([self.kind, self.word, *self.args])


_KINDS = ("OK", "NO", "ERR", "*")


def parse(line: str) -> Reply | None:
    """A reply or event line, or None if it is not protocol: a server says
    nothing but printable ASCII and blanks (a bare CR hid a second line in
    the first, found from outside)."""
    if not line.replace("\t", " ").isprintable():
        return None
    words = line.split()
    if len(words) < 2 or words[0] not in _KINDS:
        return None
    args = words[2:]
    tag = ""
    if args and args[-1].startswith("id="):
        tag = args.pop()[3:]
    return Reply(words[0], words[1], args, tag, line)


class LineSplitter:
    """Bytes in, complete lines out (LF, one CR before it removed)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        """Lines completed by data; ValueError when the peer is not
        speaking the protocol (a line past REPLY_LINE_MAX, not ASCII)."""
        self._buf += data
        out: list[str] = []
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl < 0:
                break
            end = nl - 1 if nl > start and self._buf[nl - 1] == 13 else nl
            out.append(self._buf[start:end].decode("ascii"))
            start = nl + 1
        if start:
            del self._buf[:start]
        if len(self._buf) > REPLY_LINE_MAX:
            raise ValueError("a line longer than the protocol allows")
        return out

    def reset(self) -> None:
        self._buf.clear()
