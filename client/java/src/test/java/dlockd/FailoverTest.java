package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Two real daemons on one real redis-server: a held lease survives the SIGKILL of the active one. */
@Timeout(60)
class FailoverTest {
    @Test
    void failoverKeepsTheLease() throws Exception {
        try (Daemons ds = new Daemons()) {
            Cluster cl = new Cluster(ds);
            Daemons.Proc a = cl.a, b = cl.b;
            String servers = cl.servers;
            // the standby first: the client is sent on to the active
            try (DlockClient c = Daemons.client(b.addr + "," + a.addr).build(); DlockClient w = Daemons.client(servers).build()) {
                Lease l = c.lock("fo", Duration.ofSeconds(8), null);
                CompletableFuture<Lease> waited = w.lockAsync("fo", LockOptions.ttl(Duration.ofSeconds(5)));
                Daemons.eventually(Duration.ofSeconds(10), "w waits at node a", () -> c.holders("fo").waiters().size() == 1);
                a.kill();
                Daemons.eventually(Duration.ofSeconds(20), "node b active", () -> Daemons.role(b.addr).equals("active"));
                Daemons.eventually(Duration.ofSeconds(15), "the lease confirmed at node b", () -> {
                    try {
                        l.check();
                        return true;
                    } catch (DlockException e) {
                        return false;
                    }
                });
                assertNull(l.lostCause());
                assertTrue(l.isValid());
                Status st = c.status("fo");
                assertEquals(l.token(), st.token());
                assertEquals(c.owner(), st.owner());
                Daemons.eventually(Duration.ofSeconds(15), "w waits again at node b", () -> {
                    Holders h = c.holders("fo");
                    return h.waiters().size() == 1 && h.waiters().get(0).owner().equals(w.owner()) && !h.waiters().get(0).restored();
                });
                Daemons.eventually(Duration.ofSeconds(10), "renewals confirmed again", () -> !l.atRisk());
                l.unlock();
                Lease l2 = waited.get(10, TimeUnit.SECONDS);
                assertTrue(Long.compareUnsigned(l2.token(), l.token()) > 0);
                l2.unlock();
            }
        }
    }
}
