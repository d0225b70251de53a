// SPDX-License-Identifier: MIT
// Lock.java -- the installed libdlockd-java, as a program would use it
// (tests/deb/install_test.sh): connect to the daemon at DLOCK_TEST_PORT
// with the password DLOCK_TEST_PASSWORD, take a lock, print its token.

import dlockd.DlockClient;
import dlockd.Lease;
import java.time.Duration;

public class Lock {
    public static void main(String[] args) {
        String port = System.getenv("DLOCK_TEST_PORT");
        long token;
        try (DlockClient c = DlockClient.builder().servers("127.0.0.1:" + port)
                .password(System.getenv("DLOCK_TEST_PASSWORD")).build();
             Lease lease = c.lock("deb-test/java", Duration.ofSeconds(10), Duration.ofSeconds(5))) {
            token = lease.token();
        }
        System.out.println("a lock with token " + Long.toUnsignedString(token));
    }
}
