package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Elections (lease values: LOCK value=, REFRESH value=, STATUS/HOLDERS value=, WATCH value=) against a daemon on
 * Redis, as libdlock's an_election_is_held_followed_and_handed_over (tests/test_client.c).
 */
@Timeout(60)
class ElectionTest {
    static final Duration TTL = Duration.ofSeconds(10);
    static final Duration EVENT = Duration.ofSeconds(5);

    static Daemons.Proc onRedis(Daemons ds, Daemons.Proc redis) {
        return ds.startListening("dlockd-r", " ready (", port -> List.of(Daemons.bin(), "--persist", "redis", "--redis",
                "redis://127.0.0.1:" + redis.port + "/0", "--port", String.valueOf(port), "-l", "info",
                "--state-dir", ds.dir.toString()));
    }

    /** The next event of the watch, which must be of kind k. */
    static WatchEvent next(Watch w, WatchEvent.Kind k) throws InterruptedException {
        WatchEvent e = w.poll(EVENT);
        assertNotNull(e, "no " + k + " event in time");
        assertEquals(k, e.kind(), e.toString());
        assertEquals("elect", e.name());
        return e;
    }

    @Test
    void anElectionIsHeldFollowedAndHandedOver() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = onRedis(ds, ds.redis());
            try (DlockClient a = Daemons.client(d.addr).build(); DlockClient b = Daemons.client(d.addr).build();
                 DlockClient o = Daemons.client(d.addr).build(); Watch w = o.watch("elect")) {
                // a candidate leads with its value
                Lease la = a.lock("elect", LockOptions.ttl(TTL).value("host-a:7000"));
                long term = la.token();
                WatchEvent e = next(w, WatchEvent.Kind.GRANTED);
                assertEquals("host-a:7000", e.value());
                assertEquals(term, e.token());
                assertEquals(a.owner(), e.owner());
                Status st = o.status("elect");
                assertEquals("host-a:7000", st.value());
                assertEquals(term, st.token());

                // a second waits with its own
                CompletableFuture<Lease> fb = b.lockAsync("elect", LockOptions.ttl(TTL).value("host-b:7000"));
                Daemons.eventually(EVENT, "the second candidate waits", () -> o.status("elect").waiters() == 1);
                Holders hs = o.holders("elect");
                assertEquals(1, hs.holders().size());
                assertEquals("host-a:7000", hs.holders().get(0).value());
                assertEquals("host-a:7000", hs.status().value());
                assertEquals(1, hs.waiters().size());
                assertEquals("", hs.waiters().get(0).value());

                // the leader says another value, with a space: its followers hear it, decoded, in the same term
                la.proclaim("host-a:7001 primary");
                e = next(w, WatchEvent.Kind.VALUE);
                assertEquals("host-a:7001 primary", e.value());
                assertEquals(term, e.token());
                assertEquals(a.owner(), e.owner());
                assertEquals("host-a:7001 primary", o.status("elect").value());
                assertTrue(la.isValid());

                // it resigns: the second leads, with its value, in a later term
                la.unlock();
                e = next(w, WatchEvent.Kind.RELEASED);
                assertEquals(term, e.token());
                Lease lb = fb.get(10, TimeUnit.SECONDS);
                assertTrue(Long.compareUnsigned(lb.token(), term) > 0, "the term grows");
                e = next(w, WatchEvent.Kind.GRANTED);
                assertEquals("host-b:7000", e.value());
                assertEquals(lb.token(), e.token());
                assertEquals(b.owner(), e.owner());
                st = o.status("elect");
                assertEquals("host-b:7000", st.value());
                assertEquals(lb.token(), st.token());

                // an empty value is an argument error, nothing sent; a deposed leader cannot proclaim
                assertThrows(IllegalArgumentException.class, () -> lb.proclaim(""));
                assertThrows(IllegalArgumentException.class, () -> lb.proclaim(null));
                assertThrows(NotHolderException.class, () -> la.proclaim("host-a:7002"));
                lb.unlock();
                next(w, WatchEvent.Kind.RELEASED);
                st = o.status("elect");
                assertFalse(st.held());
                assertEquals("", st.value());
            }
        }
    }

    @Test
    void aLeaderWhoseLeaseEndedCannotProclaim() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = onRedis(ds, ds.redis());
            try (DlockClient a = Daemons.client(d.addr).build(); DlockClient o = Daemons.client(d.addr).build()) {
                Lease l = a.lock("elect", LockOptions.ttl(TTL).value("host-a"));
                o.breakLease("elect", l.token(), "deposed");
                // the server may tell the loss (* EXPIRED) before the REFRESH is answered NOT_HOLDER: lost either way
                LeaseLostException e = assertThrows(LeaseLostException.class, () -> l.proclaim("host-a2"));
                assertNotNull(e.reason());
                assertFalse(l.isValid());
                assertNotNull(l.lost().get(5, TimeUnit.SECONDS));
                assertFalse(o.status("elect").held());
            }
        }
    }

    @Test
    void aLeaseReclaimedAfterRedisForgotItKeepsItsValue() {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc r = ds.redis();
            Daemons.Proc d = onRedis(ds, r);
            try (DlockClient c = Daemons.client(d.addr).build(); DlockClient o = Daemons.client(d.addr).build()) {
                Lease l = c.lock("elect", LockOptions.ttl(Duration.ofSeconds(3)).value("host-a"));
                l.proclaim("host-a:7001 primary");
                d.kill();
                assertEquals("+OK", Daemons.raw(r.addr, "FLUSHALL").get(0));
                d.restart();
                // its renewal is refused NOT_HOLDER, and it reclaims the lease with its proof and its value
                Daemons.eventually(Duration.ofSeconds(5), "reclaimed", () -> o.status("elect").token() == l.token());
                assertEquals("host-a:7001 primary", o.status("elect").value());
                assertTrue(l.isValid());
                l.unlock();
            }
        }
    }
}
