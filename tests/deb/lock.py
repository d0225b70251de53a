# SPDX-License-Identifier: MIT
"""lock.py -- the installed python3-dlockd, as a program would use it
(tests/deb/install_test.sh): connect to the daemon at DLOCK_TEST_PORT with
the password DLOCK_TEST_PASSWORD, take a lock, print its token."""

import os

import dlockd

port = os.environ["DLOCK_TEST_PORT"]
password = os.environ["DLOCK_TEST_PASSWORD"]
with dlockd.Client(f"127.0.0.1:{port}", password=password) as c:
    with c.lock("deb-test/python", ttl=10, wait=5) as lease:
        token = lease.token
print(f"a lock with token {token}")
