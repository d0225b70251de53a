# SPDX-License-Identifier: MIT
"""Client options: arguments, then the DLOCK_* environment as the
``dlock`` command reads it, then defaults; the TLS context.

Where to connect, first match wins: ``servers`` (or a list given as the
first argument), ``host``/``port``/``socket``, ``DLOCK_SERVERS`` (unless a
host, port or socket was given), ``DLOCK_SOCKET`` (unless a host or port
was given), ``DLOCK_HOST``/``DLOCK_PORT``, 127.0.0.1:7420. Credentials:
``password`` or ``secret`` (``DLOCK_SECRET``, ``DLOCK_PASSWORD``), ``user``
(``DLOCK_USER``); the owner: ``owner``/``owner_key``, or ``DLOCK_OWNER`` as
``<id>`` or ``<id>=<key>``. TLS: ``tls`` (``DLOCK_TLS``, not ``0``),
``tls_ca``/``tls_cert``/``tls_key``/``tls_server_name``
(``DLOCK_TLS_CA`` ...); the server's certificate and name are verified.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from . import _wire as wire

SERVERS_MAX = 8  # entries of a servers list, as libdlock's
ADDRS_MAX = 16  # resolved addresses kept for reconnects


@dataclass(frozen=True)
class Address:
    """One daemon: host and port, or a unix socket path. ``name`` is the
    entry as written in the servers list ("host:port"), which a standby's
    ``active=`` is matched against."""

    host: str = ""
    port: int = 0
    path: str = ""
    name: str = ""
    family: int = 0  # resolved: socket.AF_*
    sockaddr: Any = None  # resolved: what connect() takes


@dataclass
class Options:
    addresses: list[Address]
    password: str | None = None
    user: str | None = None
    owner: str | None = None
    owner_key: str | None = None
    cluster: str | None = None  # the cluster id every server must name
    ssl_context: ssl.SSLContext | None = None
    tls_server_name: str | None = None
    connect_timeout_ms: float = 2000.0
    request_timeout_ms: float = 5000.0
    reconnect: bool = True
    renew: bool = True
    max_hold_ms: float | None = None
    lost_guard_ms: float | None = None
    on_lost: Callable[..., Any] | None = None
    on_at_risk: Callable[..., Any] | None = None
    # f(lease, waiters): others wait for a lease that asked to be told
    # (lock(notify_waiters=True), the server's "* WAITING")
    on_contended: Callable[..., Any] | None = None
    # who the client says it is (HELLO host= pid= cmd=): True (or "name")
    # says the program's name, "full" its whole command line (which every
    # reader of the lock sees: its arguments may hold a secret), False
    # nothing; None parts are found (the host name, the pid, the name or
    # command line), "" leaves a part out
    describe: bool | str = True
    desc_host: str | None = None
    desc_pid: int | None = None
    desc_cmd: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _describe(v: Any) -> bool | str:
    if v in ("full", "name"):
        return "full" if v == "full" else True
    if isinstance(v, bool):
        return v
    raise ValueError(f"describe: {v!r} is not True, False, 'name' or 'full'")


def _env(environ: Mapping[str, str], name: str) -> str | None:
    v = environ.get(name)
    return v if v else None


def parse_port(v: str | int, what: str) -> int:
    try:
        p = int(v)
    except (TypeError, ValueError):
        p = 0
    if not 1 <= p <= 65535:
        raise ValueError(f"{what}: bad port {v!r} (1-65535)")
    return p


def parse_servers(servers: str) -> list[Address]:
    """"host:port,host:port" (an IPv6 host in brackets; a port may be left
    out: 7420)."""
    out = []
    entries = [e.strip() for e in servers.split(",")]
    if not entries or len(entries) > SERVERS_MAX or not all(entries):
        raise ValueError(
            f"bad servers list {servers!r}: 1 to {SERVERS_MAX} host:port, "
            "comma-separated"
        )
    for e in entries:
        host, sep, port = e.rpartition(":")
        if not sep or "]" in port:
            host, port = e, str(wire.DEFAULT_PORT)
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            raise ValueError(f"bad server {e!r}: host:port")
        out.append(Address(host, parse_port(port, f"server {e!r}"), name=e))
    return out


def resolve(addresses: list[Address]) -> list[Address]:
    """Every address of every entry, in the order given (as libdlock does
    once, at connect). A name that does not resolve is skipped: the others
    may be enough; none at all is an error."""
    out: list[Address] = []
    for a in addresses:
        if a.path:
            out.append(replace(a, family=socket.AF_UNIX, sockaddr=a.path))
            continue
        try:
            infos = socket.getaddrinfo(a.host, a.port, type=socket.SOCK_STREAM)
        except OSError:
            continue
        for fam, _, _, _, sa in infos:
            out.append(replace(a, family=fam, sockaddr=sa))
    return out[:ADDRS_MAX]


def tls_context(
    ca: str | None, cert: str | None, key: str | None
) -> ssl.SSLContext:
    """A client context that verifies the server's certificate (against
    `ca`, else the system's CAs) and its name; TLS 1.2 at least."""
    if bool(cert) != bool(key):
        raise ValueError("tls_cert and tls_key go together")
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def build(
    servers: str | list[str] | None,
    kw: dict[str, Any],
    environ: Mapping[str, str] | None = None,
) -> Options:
    """Options from a client's arguments (see the module docstring)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    host, port, sock = kw.pop("host", None), kw.pop("port", None), kw.pop("socket", None)
    if isinstance(servers, (list, tuple)):
        servers = ",".join(servers)
    if servers is None and host is None and port is None and sock is None:
        servers = _env(env, "DLOCK_SERVERS")
    if servers is not None:
        addresses = parse_servers(servers)
    else:
        if sock is None and host is None and port is None:
            sock = _env(env, "DLOCK_SOCKET")
        if sock is not None:
            addresses = [Address(path=sock, name=sock)]
        else:
            h = host or _env(env, "DLOCK_HOST") or "127.0.0.1"
            p = parse_port(port, "port") if port is not None else (
                parse_port(env["DLOCK_PORT"], "DLOCK_PORT")
                if _env(env, "DLOCK_PORT")
                else wire.DEFAULT_PORT
            )
            addresses = [Address(h, p, name=f"{h}:{p}")]

    password = kw.pop("secret", None) or kw.pop("password", None)
    kw.pop("password", None)
    if password is None:
        password = _env(env, "DLOCK_SECRET") or _env(env, "DLOCK_PASSWORD")
    if password is not None:
        wire.check_word(password, "password", 512)
    user = kw.pop("user", None) or _env(env, "DLOCK_USER")
    if user is not None:
        wire.check_user(user)

    owner, key = kw.pop("owner", None), kw.pop("owner_key", None)
    if owner is None and _env(env, "DLOCK_OWNER"):
        owner, _, k = env["DLOCK_OWNER"].partition("=")
        key = key or k or None
    if owner is not None:
        wire.check_owner(owner)
    if key is not None:
        wire.check_key(key)
    cluster = kw.pop("cluster", None) or _env(env, "DLOCK_CLUSTER")
    if cluster is not None and (
        len(cluster) != 32 or cluster.strip("0123456789abcdef") != ""
    ):
        raise ValueError(f"cluster: bad id {cluster!r} (32 hex digits)")

    tls = kw.pop("tls", None)
    ca = kw.pop("tls_ca", None) or _env(env, "DLOCK_TLS_CA")
    cert = kw.pop("tls_cert", None) or _env(env, "DLOCK_TLS_CERT")
    tkey = kw.pop("tls_key", None) or _env(env, "DLOCK_TLS_KEY")
    server_name = kw.pop("tls_server_name", None) or _env(env, "DLOCK_TLS_SERVER_NAME")
    if tls is None and _env(env, "DLOCK_TLS"):
        tls = env["DLOCK_TLS"] != "0"
    ctx: ssl.SSLContext | None = None
    if isinstance(tls, ssl.SSLContext):
        ctx = tls
    elif tls or ca or cert:
        ctx = tls_context(ca, cert, tkey)
    elif tkey:
        raise ValueError("tls_cert and tls_key go together")

    def seconds(name: str, default: float | None) -> float | None:
        v = kw.pop(name, default)
        if v is None:
            return None
        return float(wire.ms_of(v, name))

    o = Options(
        addresses=addresses,
        password=password,
        user=user,
        owner=owner,
        owner_key=key,
        cluster=cluster,
        ssl_context=ctx if not (addresses and addresses[0].path) else None,
        tls_server_name=server_name,
        connect_timeout_ms=seconds("connect_timeout", 2.0) or 2000.0,
        request_timeout_ms=seconds("request_timeout", 5.0) or 5000.0,
        reconnect=bool(kw.pop("reconnect", True)),
        renew=bool(kw.pop("renew", True)),
        max_hold_ms=seconds("max_hold", None),
        lost_guard_ms=seconds("lost_guard", None),
        on_lost=kw.pop("on_lost", None),
        on_at_risk=kw.pop("on_at_risk", None),
        on_contended=kw.pop("on_contended", None),
        describe=_describe(kw.pop("describe", True)),
        desc_host=kw.pop("desc_host", None),
        desc_pid=kw.pop("desc_pid", None),
        desc_cmd=kw.pop("desc_cmd", None),
    )
    if o.desc_pid is not None and (
        isinstance(o.desc_pid, bool)
        or not isinstance(o.desc_pid, int)
        or not 1 <= o.desc_pid <= wire.DESC_PID_MAX
    ):
        raise ValueError(f"bad desc_pid {o.desc_pid!r}: a process id, 1-{wire.DESC_PID_MAX}")
    for name in ("desc_host", "desc_cmd"):
        if getattr(o, name) is not None and not isinstance(getattr(o, name), str):
            raise TypeError(f"{name} is a str, not {getattr(o, name)!r}")
    if kw:
        raise TypeError(f"unknown argument(s): {', '.join(sorted(kw))}")
    return o
