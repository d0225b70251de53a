package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** An active daemon paused past its leadership tells its clients "* BYE not-active active=<b>" once resumed. */
@Timeout(60)
class DeposedTest {
    @Test
    void deposedActiveSaysBye() throws Exception {
        try (Daemons ds = new Daemons()) {
            Cluster cl = new Cluster(ds);
            try (DlockClient c = Daemons.client(cl.servers).build()) {
                Lease l = c.lock("bye", Duration.ofSeconds(10), null);
                cl.a.signal("STOP");
                long stopped = System.nanoTime();
                Daemons.eventually(Duration.ofSeconds(20), "node b active", () -> Daemons.role(cl.b.addr).equals("active"));
                Daemons.eventually(Duration.ofSeconds(10), "the lease at risk (renewal overdue)", l::atRisk);
                long since = (System.nanoTime() - stopped) / 1_000_000;
                if (since < 3500) Daemons.sleep(3500 - since);
                cl.a.signal("CONT");
                Daemons.eventually(Duration.ofSeconds(15), "renewals confirmed at node b", () -> !l.atRisk() && l.lostCause() == null);
                assertEquals(l.token(), c.status("bye").token());
                assertNull(l.lostCause());
                l.unlock();
            }
        }
    }
}
