package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A daemon on Redis killed and restarted: the lease goes on with its token; when Redis forgot it, by RECLAIM. */
@Timeout(40)
class RestartTest {
    static Daemons.Proc standalone(Daemons ds, Daemons.Proc redis) {
        return ds.startListening("dlockd-r", " ready (", port -> List.of(Daemons.bin(), "--persist", "redis", "--redis",
                "redis://127.0.0.1:" + redis.port + "/0", "--port", String.valueOf(port), "-l", "info",
                "--state-dir", ds.dir.toString()));
    }

    @Test
    void aLeaseSurvivesKill9AndRestart() {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = standalone(ds, ds.redis());
            try (DlockClient c = Daemons.client(d.addr).build(); DlockClient o = Daemons.client(d.addr).build()) {
                Lease l = c.lock("k", Duration.ofSeconds(3), null);
                CompletableFuture<LeaseLostException> lost = l.lost();
                d.kill();
                Daemons.sleep(200);
                d.restart();
                Daemons.sleep(1500); // past a renewal at the restarted daemon
                assertTrue(l.isValid() && !lost.isDone(), String.valueOf(l.lostCause()));
                assertEquals(l.token(), o.status("k").token());
                assertThrows(BusyException.class, () -> o.tryLock("k", Duration.ofSeconds(1)));
                l.check();
                l.unlock();
                assertTrue(!o.status("k").held());
            }
        }
    }

    @Test
    void aLeaseRedisForgotIsReclaimedWithItsProof() {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc r = ds.redis();
            Daemons.Proc d = standalone(ds, r);
            try (DlockClient c = Daemons.client(d.addr).build(); DlockClient o = Daemons.client(d.addr).build()) {
                Lease l = c.lock("k", Duration.ofSeconds(3), null);
                CompletableFuture<LeaseLostException> lost = l.lost();
                d.kill();
                assertEquals("+OK", Daemons.raw(r.addr, "FLUSHALL").get(0));
                d.restart();
                // the client reconnects, its renewal is refused NOT_HOLDER, and it reclaims the lease
                Daemons.eventually(Duration.ofSeconds(5), "reclaimed", () -> o.status("k").token() == l.token());
                long end = System.nanoTime() + Duration.ofMillis(3000 + 4000 + 1000).toNanos();
                while (System.nanoTime() < end) {
                    assertTrue(!lost.isDone(), String.valueOf(l.lostCause()));
                    l.check();
                    Daemons.sleep(100);
                }
                assertTrue(l.isValid());
                assertEquals(l.token(), o.status("k").token());
                l.unlock();
            }
        }
    }
}
