package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A daemon frozen with SIGSTOP: the loss is reported before the local deadline counted from the send. */
@Timeout(30)
class LossTest {
    @Test
    void lossReportedBeforeTheLocalDeadline() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient c = Daemons.client(d.addr).serverTimeout(Duration.ofSeconds(8)).build()) {
                double ttl = 1500;
                double sent = Engine.nowMs(); // the LOCK is sent after this
                Lease l = c.lock("loss/frozen", Duration.ofMillis((long) ttl), null);
                double returned = Engine.nowMs(); // and before this
                double[] toldAt = {0};
                CompletableFuture<LeaseLostException> told = new CompletableFuture<>();
                l.onLost(e -> {
                    toldAt[0] = Engine.nowMs();
                    told.complete(e);
                });
                d.signal("STOP");
                double stopped = Engine.nowMs();
                // every confirmation was sent before the daemon stopped; a renewal TTL/3 after the grant at the earliest
                double bound = (stopped - sent >= ttl / 3 ? stopped : returned) + ttl;
                LeaseLostException e = told.get(10, TimeUnit.SECONDS);
                assertEquals(LostReason.UNCONFIRMED, e.reason());
                assertFalse(l.isValid());
                assertEquals(Duration.ZERO, l.remaining());
                double[] dl = {0};
                c.engine().exec(() -> dl[0] = l.deadlineM);
                assertTrue(dl[0] <= bound, "local deadline " + (dl[0] - stopped) + " ms after the stop, past " + (bound - stopped));
                assertTrue(toldAt[0] < dl[0], "told " + (toldAt[0] - dl[0]) + " ms after the local deadline");
                assertTrue(l.atRisk() || !l.isValid());
                d.signal("CONT");
                // the client goes on with the daemon once it answers again
                c.ping();
            }
        }
    }
}
