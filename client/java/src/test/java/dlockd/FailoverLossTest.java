package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A lease shorter than the take-over is lost before its local deadline, before anyone else gets the lock. */
@Timeout(60)
class FailoverLossTest {
    @Test
    void failoverTooSlowLosesTheLease() throws Exception {
        try (Daemons ds = new Daemons()) {
            Cluster cl = new Cluster(ds);
            try (DlockClient c = Daemons.client(cl.servers).lostGuard(Duration.ofMillis(150)).build();
                 DlockClient w = Daemons.client(cl.servers).build()) {
                Lease l = c.lock("short", Duration.ofMillis(500), null);
                double[] toldAt = {0};
                CompletableFuture<LeaseLostException> told = new CompletableFuture<>();
                l.onLost(e -> {
                    toldAt[0] = Engine.nowMs();
                    told.complete(e);
                });
                cl.a.kill();
                double killed = Engine.nowMs(); // every confirmation was sent before this
                LeaseLostException e = told.get(10, TimeUnit.SECONDS);
                assertEquals(LostReason.UNCONFIRMED, e.reason());
                assertFalse(l.isValid());
                double[] dl = {0};
                c.engine().exec(() -> dl[0] = l.deadlineM);
                assertTrue(dl[0] <= killed + 500, "local deadline " + (dl[0] - killed) + " ms after the kill");
                assertTrue(toldAt[0] < dl[0], "told " + (toldAt[0] - dl[0]) + " ms after the local deadline");
                // someone else gets it at node b, with a larger token, after the loss was told
                Lease l2 = w.lock("short", Duration.ofSeconds(5), Duration.ofSeconds(30));
                Status st = w.status("short");
                double began = Engine.nowMs() - st.heldFor().toMillis();
                assertTrue(Long.compareUnsigned(l2.token(), l.token()) > 0);
                assertEquals(l2.token(), st.token());
                assertTrue(began >= toldAt[0] - 5, "the new lease began " + (toldAt[0] - began) + " ms before the loss was told");
                c.ping(); // and the client goes on at node b
                l2.unlock();
            }
        }
    }
}
