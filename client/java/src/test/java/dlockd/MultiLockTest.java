package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Several locks at once (DlockClient.lockAll: LOCK a b ...): what goes on the wire and what the client makes of the
 * replies and events, against a scripted server; then against the real daemon.
 */
@Timeout(60)
class MultiLockTest {
    static String tag(String l) {
        return RobustnessTest.tagOf(l);
    }

    /** The lines a client wrote (without the connection number) that start so. */
    static List<String> sent(FakeServerTest.Fake f, String start) {
        List<String> out = new ArrayList<>();
        for (String x : f.seen) {
            String l = x.substring(x.indexOf(' ') + 1);
            if (l.startsWith(start)) out.add(l);
        }
        return out;
    }

    /** Answers REFRESH, UNLOCK and CANCEL as a daemon would (for leases of 9 s). */
    static String ordinary(String l) {
        String[] w = l.split(" ");
        if (l.startsWith("REFRESH ")) return "OK REFRESHED " + w[1] + " 9000 id=" + tag(l);
        if (l.startsWith("UNLOCK ")) return "OK RELEASED " + w[1] + " id=" + tag(l);
        if (l.startsWith("CANCEL ")) return "OK CANCELLED " + w[1] + " id=" + tag(l);
        if (l.startsWith("PING")) return "OK PONG id=" + tag(l);
        return null;
    }

    static final LockOptions TTL9 = LockOptions.ttl(Duration.ofSeconds(9));

    @Test
    void theNamesGoInByteOrderAndTheLeasesComeBackSo() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK ") || l.startsWith("TRYLOCK ")) {
                return "OK LOCKED B 3 id=" + tag(l) + "\r\ngranted B 7 9000 holds=1\r\ngranted a 8 9000 holds=1"
                        + " proof=0123456789abcdef0123456789abcdef until=99\r\ngranted ab 9 9000 holds=1";
            }
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            Leases ls = c.lockAll(List.of("ab", "a", "B"), TTL9);
            String l = sent(f, "LOCK ").get(0);
            assertTrue(l.startsWith("LOCK B a ab ttl=9000 wait=inf req="), l);
            assertEquals(3, ls.size());
            assertEquals(List.of("B", "a", "ab"), ls.list().stream().map(Lease::name).toList());
            assertEquals(8, ls.get("a").token());
            assertEquals("B", ls.first().name());
            assertNull(ls.get("zz"));
            assertTrue(ls.isValid());
            for (Lease x : ls) assertEquals(Lease.Mode.EXCLUSIVE, x.mode());
            ls.unlockAll();
            assertFalse(ls.isValid());
            assertEquals(3, sent(f, "UNLOCK ").size(), f.seen.toString());
            ls.close(); // released already: no error
            assertThrows(NotHolderException.class, ls::unlockAll);

            Leases t = c.tryLockAll(List.of("B", "ab", "a"), TTL9.waitFor(Duration.ofMinutes(1)));
            String tl = sent(f, "TRYLOCK ").get(0);
            assertTrue(tl.startsWith("TRYLOCK B a ab ttl=9000 req="), tl);
            assertFalse(tl.contains("wait="), tl);
            assertTrue(!tl.contains(" req=" + RequestIdTest.kv(l, "req") + " "), "another acquire, another id");
            t.close();
        }
    }

    @Test
    void theArgumentsAreCheckedBeforeAnythingIsSent() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK x ")) return "OK GRANTED x 5 9000 holds=1 id=" + tag(l);
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of(), TTL9));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b", "a"), TTL9));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b c"), TTL9));
            List<String> many = new ArrayList<>();
            for (int i = 0; i < 65; i++) many.add("n" + i);
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(many, TTL9));
            List<String> longNames = List.of("a".repeat(255), "b".repeat(255), "c".repeat(255), "d".repeat(255));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(longNames, TTL9));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b"), TTL9.shared()));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b"), TTL9.limit(3)));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b"), TTL9.notifyWaiters()));
            assertThrows(IllegalArgumentException.class, () -> c.lockAll(List.of("a", "b"), TTL9.value("v")));
            // a name this client holds: refused here, as the server refuses one its owner holds (ALREADY_HELD)
            Lease x = c.lock("x", TTL9);
            HeldByOwnerException e = assertThrows(HeldByOwnerException.class, () -> c.lockAll(List.of("w", "x"), TTL9));
            assertTrue(e.getMessage().contains("x is held by this client"), e.getMessage());
            c.ping(); // after it, in order: had anything been sent, it would be seen by now
            assertEquals(List.of(), sent(f, "LOCK w"), f.seen.toString());
            x.unlock();
        }
    }

    @Test
    void oneNameIsAnOrdinaryLock() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK one ")) return "OK GRANTED one 5 9000 holds=1 id=" + tag(l);
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            try (Leases ls = c.lockAll(List.of("one"), TTL9)) {
                assertEquals(1, ls.size());
                assertEquals(5, ls.first().token());
                assertTrue(sent(f, "LOCK one ttl=9000 wait=inf req=").size() == 1, f.seen.toString());
            }
            assertEquals(1, sent(f, "UNLOCK one 5").size(), f.seen.toString());
        }
    }

    /** A multi-lock that waited: its * LOCKED leases are confirmed (REFRESH each), then handed out, and renewed. */
    @Test
    void aMultiLockThatWaitedIsConfirmedThenHandedOut() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK ")) {
                String t = tag(l);
                return "OK QUEUED p 1 at=q id=" + t + "\r\n* LOCKED p 2 id=" + t
                        + "\r\ngranted p 11 900 holds=1\r\ngranted q 12 900 holds=1";
            }
            return l.startsWith("REFRESH ") ? ordinary(l).replace(" 9000 ", " 900 ") : ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            Leases ls = c.lockAll(List.of("q", "p"), LockOptions.ttl(Duration.ofMillis(900)).waitFor(Duration.ofSeconds(5)));
            assertEquals(List.of(11L, 12L), ls.list().stream().map(Lease::token).toList());
            assertEquals(1, sent(f, "REFRESH p 11 ttl=900").size(), f.seen.toString());
            assertEquals(1, sent(f, "REFRESH q 12 ttl=900").size(), f.seen.toString());
            String l = sent(f, "LOCK ").get(0);
            assertTrue(l.startsWith("LOCK p q ttl=900 wait=") && !l.contains("wait=inf"), l);
            Daemons.sleep(1200); // renewed as any lease
            assertTrue(ls.isValid());
            assertTrue(sent(f, "REFRESH p 11").size() >= 2, f.seen.toString());
            ls.unlockAll();
        }
    }

    /** How the refusals and the ends of a wait map onto the client's exceptions; nothing is held after any. */
    @Test
    void refusalsAndFailuresMapOntoTheExceptions() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            String t = tag(l);
            if (l.startsWith("TRYLOCK a b ")) return "NO BUSY b 2900 owner=alice held_ms=100 id=" + t;
            if (l.startsWith("LOCK c d ")) return "NO ALREADY_HELD d 77 id=" + t;
            if (l.startsWith("LOCK e f ")) return "NO DEADLOCK f 2 alice g id=" + t;
            if (l.startsWith("LOCK g h ")) return "ERR LIMIT one multi-lock at a time per connection id=" + t;
            if (l.startsWith("LOCK i j ")) return "OK QUEUED i 1 at=j id=" + t + "\r\n* FAILED i DEADLOCK c 3 bob b carol j id=" + t;
            if (l.startsWith("LOCK k l ")) return "OK QUEUED k 1 at=k id=" + t + "\r\n* FAILED k UNAVAILABLE persistence went down id=" + t;
            if (l.startsWith("LOCK m n ")) return "OK QUEUED m 2 at=n id=" + t + "\r\n* FAILED m EXPIRED m id=" + t;
            if (l.startsWith("LOCK o p ")) return "OK QUEUED o 1 at=o id=" + t + "\r\n* TIMEOUT o id=" + t;
            if (l.startsWith("LOCK q r ")) return "NO LIMIT_MISMATCH r 3 id=" + t;
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            BusyException b = assertThrows(BusyException.class, () -> c.tryLockAll(List.of("b", "a"), TTL9));
            assertEquals("alice", b.holder().owner());
            HeldByOwnerException h = assertThrows(HeldByOwnerException.class, () -> c.lockAll(List.of("c", "d"), TTL9));
            assertEquals("ALREADY_HELD", h.code());
            assertEquals(2, assertThrows(DeadlockException.class, () -> c.lockAll(List.of("e", "f"), TTL9)).owners());
            assertThrows(LimitException.class, () -> c.lockAll(List.of("g", "h"), TTL9));
            DeadlockException d = assertThrows(DeadlockException.class, () -> c.lockAll(List.of("i", "j"), TTL9));
            assertEquals(3, d.owners());
            assertTrue(d.serverLine().startsWith("* FAILED i DEADLOCK"), d.serverLine());
            assertThrows(UnavailableException.class, () -> c.lockAll(List.of("k", "l"), TTL9));
            DlockException x = assertThrows(DlockException.class, () -> c.lockAll(List.of("m", "n"), TTL9));
            assertEquals("EXPIRED", x.code());
            assertEquals(DlockException.Kind.SERVER, x.kind());
            assertThrows(LockTimeoutException.class, () -> c.lockAll(List.of("o", "p"), TTL9.waitFor(Duration.ofSeconds(1))));
            assertEquals(3, assertThrows(LimitMismatchException.class, () -> c.lockAll(List.of("q", "r"), TTL9)).limit());
            c.ping(); // the connection is still up: nothing above was a protocol error
            assertEquals(1, f.conns.get());
        }
    }

    /** Giving up a wait sends CANCEL of the first name; grants that crossed it are given back. */
    @Test
    void cancellingAWaitCancelsTheFirstAndGivesCrossedGrantsBack() throws Exception {
        String[] lockTag = new String[1];
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK ")) {
                lockTag[0] = tag(l);
                return "OK QUEUED s 1 at=t id=" + lockTag[0];
            }
            if (l.startsWith("CANCEL s ")) {
                // the grant was on its way: it crosses the CANCEL
                return "* LOCKED s 2 id=" + lockTag[0] + "\r\ngranted s 21 9000 holds=1\r\ngranted t 22 9000 holds=1"
                        + "\r\nNO NOT_QUEUED s id=" + tag(l);
            }
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            CompletableFuture<Leases> j = c.lockAllAsync(List.of("t", "s"), TTL9);
            Daemons.eventually(Duration.ofSeconds(5), "LOCK sent", () -> !sent(f, "LOCK ").isEmpty());
            c.ping(); // the QUEUED came before the PONG
            assertTrue(j.cancel(true));
            Daemons.eventually(Duration.ofSeconds(5), "both grants given back",
                    () -> sent(f, "UNLOCK s 21").size() == 1 && sent(f, "UNLOCK t 22").size() == 1);
            assertEquals(1, sent(f, "CANCEL s").size(), f.seen.toString());
            c.ping();
            assertEquals(1, f.conns.get(), "the crossed grant is no protocol error");
        }
    }

    /** A grant that does not match the request (another order, a TTL longer than asked) is given back and refused. */
    @Test
    void aGrantNoServerMayMakeIsGivenBack() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK u v ")) {
                return n == 1 ? "OK LOCKED u 2 id=" + tag(l) + "\r\ngranted v 31 9000 holds=1\r\ngranted u 32 9000 holds=1"
                        : "OK LOCKED u 2 id=" + tag(l) + "\r\ngranted u 33 9000 holds=1\r\ngranted v 34 99000 holds=1";
            }
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            assertThrows(DlockProtocolException.class, () -> c.lockAll(List.of("u", "v"), TTL9));
            assertThrows(DlockProtocolException.class, () -> c.lockAll(List.of("u", "v"), TTL9));
            Daemons.eventually(Duration.ofSeconds(5), "the grants given back", () -> {
                for (String s : new String[] {"UNLOCK v 31", "UNLOCK u 32", "UNLOCK u 33", "UNLOCK v 34"}) {
                    if (sent(f, s).isEmpty()) return false;
                }
                return true;
            });
            assertTrue(f.conns.get() >= 2, "dropped");
        }
    }

    /** A multi-lock whose reply a drop lost is sent again with the same request id. */
    @Test
    void theSameIdOnEveryWrite() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("LOCK ")) {
                return n == 1 ? "-" : "OK LOCKED w 2 id=" + tag(l) + "\r\ngranted w 41 9000 holds=1\r\ngranted x 42 9000 holds=1";
            }
            return ordinary(l);
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            CompletableFuture<Leases> j = c.lockAllAsync(List.of("x", "w"), TTL9);
            Daemons.eventually(Duration.ofSeconds(5), "LOCK sent", () -> !sent(f, "LOCK ").isEmpty());
            f.socks.get(0).close();
            Leases ls = j.get(10, TimeUnit.SECONDS);
            List<String> ws = sent(f, "LOCK w x ");
            assertEquals(2, ws.size(), f.seen.toString());
            String id = RequestIdTest.kv(ws.get(0), "req");
            assertNotNull(id, ws.get(0));
            assertEquals(id, RequestIdTest.kv(ws.get(1), "req"));
            ls.unlockAll();
        }
    }

    // ---- against the real daemon --------------------------------------------------------------

    static String st(String addr, String name) {
        return Daemons.raw(addr, "STATUS " + name).get(0);
    }

    @Test
    void allOrNoneAgainstTheDaemon() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient a = Daemons.client(d.addr).build(); DlockClient b = Daemons.client(d.addr).build()) {
                Lease y = a.lock("my", TTL9);
                assertThrows(BusyException.class, () -> b.tryLockAll(List.of("mz", "my", "mx"), TTL9));
                assertTrue(st(d.addr, "mx").contains("state=free"));
                // waits holding mx, gives it back when given up
                CompletableFuture<Leases> j = b.lockAllAsync(List.of("my", "mx"), TTL9);
                Daemons.eventually(Duration.ofSeconds(5), "mx held while it waits", () -> st(d.addr, "mx").contains("state=held"));
                assertTrue(j.cancel(true));
                Daemons.eventually(Duration.ofSeconds(5), "mx given back", () -> st(d.addr, "mx").contains("state=free"));
                // waits, then has them all once my is released; renewed past its TTL
                CompletableFuture<Leases> k = b.lockAllAsync(List.of("mz", "my", "mx"), LockOptions.ttl(Duration.ofMillis(600)));
                Daemons.eventually(Duration.ofSeconds(5), "waiting", () -> st(d.addr, "my").contains("waiters=1"));
                y.unlock();
                Leases ls = k.get(10, TimeUnit.SECONDS);
                assertEquals(List.of("mx", "my", "mz"), ls.list().stream().map(Lease::name).toList());
                assertTrue(Long.compareUnsigned(y.token(), ls.get("my").token()) < 0);
                Daemons.sleep(1000);
                assertTrue(ls.isValid());
                for (Lease l : ls) {
                    assertTrue(st(d.addr, l.name()).contains("token=" + Long.toUnsignedString(l.token())), st(d.addr, l.name()));
                    l.check();
                }
                assertThrows(HeldByOwnerException.class, () -> b.lockAll(List.of("mw", "mx"), TTL9));
                // another client of b's owner: the server refuses it (NO ALREADY_HELD), nothing taken
                try (DlockClient b2 = Daemons.client(d.addr).owner(b.owner()).ownerKey(b.ownerKey()).build()) {
                    HeldByOwnerException e = assertThrows(HeldByOwnerException.class, () -> b2.lockAll(List.of("mw", "mx"), TTL9));
                    assertEquals("ALREADY_HELD", e.code());
                    assertTrue(st(d.addr, "mw").contains("state=free"));
                }
                ls.unlockAll();
                for (String n : List.of("mx", "my", "mz", "mw")) assertTrue(st(d.addr, n).contains("state=free"), st(d.addr, n));
            }
        }
    }

    /** A multi-lock whose connection drops while it waits is sent again with its id: it takes its wait over. */
    @Test
    void aWaitSurvivesADrop() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (RequestIdTest.Proxy p = new RequestIdTest.Proxy(d.port);
                 DlockClient a = Daemons.client(d.addr).build(); DlockClient b = Daemons.client(p.addr()).build()) {
                Lease y = a.lock("dy", TTL9);
                CompletableFuture<Leases> j = b.lockAllAsync(List.of("dy", "dx"), TTL9.waitFor(Duration.ofSeconds(20)));
                Daemons.eventually(Duration.ofSeconds(5), "waiting", () -> st(d.addr, "dy").contains("waiters=1"));
                p.cut();
                Daemons.sleep(300); // reconnected, the LOCK sent again
                y.unlock();
                Leases ls = j.get(15, TimeUnit.SECONDS);
                for (Lease l : ls) {
                    String s = st(d.addr, l.name());
                    assertTrue(s.contains("token=" + Long.toUnsignedString(l.token())) && s.contains("count=1"), s);
                }
                ls.unlockAll();
                assertTrue(st(d.addr, "dx").contains("state=free") && st(d.addr, "dy").contains("state=free"));
            }
        }
    }

    /** The server runs one multi-lock at a time per connection: a second one of the client while one waits. */
    @Test
    void oneMultiLockAtATimePerClient() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient a = Daemons.client(d.addr).build(); DlockClient b = Daemons.client(d.addr).build()) {
                Lease y = a.lock("oy", TTL9);
                CompletableFuture<Leases> j = b.lockAllAsync(List.of("ox", "oy"), TTL9);
                Daemons.eventually(Duration.ofSeconds(5), "waiting", () -> st(d.addr, "oy").contains("waiters=1"));
                assertThrows(LimitException.class, () -> b.lockAll(List.of("p1", "p2"), TTL9));
                y.unlock();
                j.get(10, TimeUnit.SECONDS).unlockAll();
                b.lockAll(List.of("p1", "p2"), TTL9).unlockAll();
            }
        }
    }
}
