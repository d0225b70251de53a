# SPDX-License-Identifier: MIT
"""tlsflood.py -- what one address's TLS handshakes cost the daemon.

    DLOCKD=build/dlockd python3 tests/bench/tlsflood.py [seconds] [threads]

Makes a throwaway certificate (openssl), then starts dlockd daemons of
its own (--persist none, TLS on a free port, a password, so that every
connection must authenticate), one after the other, side by side in one
run: the shipped max_connects_per_address, and 0 (no limit: the daemon
before it). Against each, `threads` threads of this one address connect,
finish the TLS handshake and close, as fast as they can, for `seconds`.
Prints the handshakes the daemon completed a second, the connections it
refused, and the CPU the daemon used (% of one core, from /proc), with
the ratio of the two. A measuring tool (docs/security.md), not a test: it
asserts nothing.
"""
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import benchd

PASSWORD = "tlsflood-password-0123456789"


def flood(port: int, ctx: ssl.SSLContext, end: float, out: list, i: int) -> None:
    done = refused = 0
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                with ctx.wrap_socket(s, server_hostname="localhost"):
                    done += 1
        except (OSError, ssl.SSLError):
            refused += 1
    out[i] = (done, refused)


def run(dlockd: str, d: str, rate: int, seconds: float, threads: int) -> tuple:
    conf = os.path.join(d, "dlockd-%d.conf" % rate)
    with open(conf, "w") as f:
        f.write("[server]\npassword = %s\n" % PASSWORD)
        f.write("[limits]\nmax_connects_per_address = %d\n" % rate)
        f.write("max_unauth_per_address = 1000\n")
        f.write("[tls]\ncert = %s/server.pem\nkey = %s/server.key\n" % (d, d))
    ctx = ssl.create_default_context(cafile=os.path.join(d, "server.pem"))
    with open(os.path.join(d, "dlockd-%d.log" % rate), "w") as log, \
            benchd.daemon(dlockd, log, "-c", conf) as (port, p):
        time.sleep(1.1)  # the probe's connection refilled
        out = [(0, 0)] * threads
        c0, t0 = benchd.cpu_s(p.pid), time.monotonic()
        ts = [
            threading.Thread(target=flood, args=(port, ctx, t0 + seconds, out, i))
            for i in range(threads)
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt, c1 = time.monotonic() - t0, benchd.cpu_s(p.pid)
    done = sum(o[0] for o in out)
    refused = sum(o[1] for o in out)
    return done / dt, refused / dt, 100.0 * (c1 - c0) / dt


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    dlockd = os.environ.get("DLOCKD", "build/dlockd")
    with tempfile.TemporaryDirectory(prefix="tlsflood-") as d:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", d + "/server.key",
             "-out", d + "/server.pem", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True,
        )
        rows = [
            ("limit 100/s (shipped)", run(dlockd, d, 100, seconds, threads)),
            ("no limit", run(dlockd, d, 0, seconds, threads)),
        ]
    print("one address, %d threads connecting over TLS for %g s" % (threads, seconds))
    print("%-22s %14s %12s %12s" % ("", "handshakes/s", "refused/s", "daemon CPU %"))
    for name, (hs, ref, cpu) in rows:
        print("%-22s %14.0f %12.0f %12.1f" % (name, hs, ref, cpu))
    print("CPU ratio, limited / unlimited: %.3f" % (rows[0][1][2] / max(rows[1][1][2], 0.001)))


if __name__ == "__main__":
    main()
