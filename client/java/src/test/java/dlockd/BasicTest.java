package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Locking against one memory-only daemon. */
@Timeout(30)
class BasicTest {
    static Daemons ds;
    static Daemons.Proc d;
    static final List<DlockClient> clients = Collections.synchronizedList(new ArrayList<>());

    @BeforeAll
    static void start() {
        ds = new Daemons();
        d = ds.dlockd();
    }

    @AfterAll
    static void stop() {
        for (DlockClient c : clients) c.close();
        ds.close();
    }

    static DlockClient client() {
        DlockClient c = Daemons.client(d.addr).build();
        clients.add(c);
        return c;
    }

    static final Duration TTL = Duration.ofSeconds(10);

    @Test
    void grantUnlockTokensGrow() {
        DlockClient c = client();
        long prev = 0;
        for (int i = 0; i < 3; i++) {
            try (Lease l = c.lock("basic/grant", TTL, Duration.ofSeconds(5))) {
                assertTrue(l.isValid());
                assertEquals("basic/grant", l.name());
                assertEquals(Lease.Mode.EXCLUSIVE, l.mode());
                assertTrue(Long.compareUnsigned(l.token(), prev) > 0, "token grows");
                prev = l.token();
                long rem = l.remaining().toMillis();
                assertTrue(rem > 5000 && rem <= 10000, "remaining " + rem);
                Status st = c.status("basic/grant");
                assertTrue(st.held());
                c.check("basic/grant", l.token());
                assertEquals(l.token(), st.token());
                assertEquals(c.owner(), st.owner());
                l.check();
            }
        }
        assertFalse(c.status("basic/grant").held());
        c.ping();
        assertEquals(32, c.clusterId().length());
        assertTrue(c.ownerKey().length() >= 16);
    }

    @Test
    void unlockTwiceAndClose() {
        DlockClient c = client();
        Lease l = c.lock("basic/twice", TTL, null);
        l.unlock();
        assertFalse(l.isValid());
        assertThrows(NotHolderException.class, l::unlock);
        l.close(); // no error: nothing left to release
        assertEquals(LostReason.NOT_LOST, l.lostReason());
    }

    @Test
    void tryLockBusyNamesTheHolder() {
        DlockClient a = client(), b = client();
        try (Lease l = a.lock("basic/busy", TTL, null)) {
            BusyException e = assertThrows(BusyException.class, () -> b.tryLock("basic/busy", TTL));
            assertEquals("BUSY", e.code());
            assertNotNull(e.holder());
            assertEquals(a.owner(), e.holder().owner());
            // the same client holds it: busy too, without asking the server
            assertThrows(BusyException.class, () -> a.tryLock("basic/busy", TTL));
            assertTrue(l.isValid());
        }
        b.tryLock("basic/busy", TTL).close();
    }

    @Test
    void waitTimesOut() {
        DlockClient a = client(), b = client();
        try (Lease l = a.lock("basic/wait", TTL, null)) {
            long t0 = System.nanoTime();
            LockTimeoutException e = assertThrows(LockTimeoutException.class,
                    () -> b.lock("basic/wait", TTL, Duration.ofMillis(300)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 250 && ms < 8000, "waited " + ms + " ms: " + e);
            assertTrue(l.isValid());
        }
    }

    @Test
    void waitersAreServedInOrder() throws Exception {
        DlockClient a = client();
        List<DlockClient> ws = List.of(client(), client(), client());
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        Lease l = a.lock("basic/fifo", TTL, null);
        List<CompletableFuture<Lease>> fs = new ArrayList<>();
        for (int i = 0; i < ws.size(); i++) {
            final int n = i;
            CompletableFuture<Lease> f = ws.get(i).lockAsync("basic/fifo", LockOptions.ttl(TTL));
            fs.add(f.thenApply(x -> {
                order.add("w" + n);
                x.close();
                return x;
            }));
            final int queued = i + 1;
            Daemons.eventually(Duration.ofSeconds(5), "queued", () -> a.holders("basic/fifo").waiters().size() == queued);
        }
        Holders h = a.holders("basic/fifo");
        assertEquals(1, h.holders().size());
        assertEquals(ws.get(0).owner(), h.waiters().get(0).owner());
        assertEquals(1, h.waiters().get(0).position());
        l.unlock();
        for (CompletableFuture<Lease> f : fs) f.get(10, TimeUnit.SECONDS);
        assertEquals(List.of("w0", "w1", "w2"), order);
    }

    @Test
    void sharedAndSemaphore() {
        DlockClient a = client(), b = client(), w = client();
        LockOptions shared = LockOptions.ttl(TTL).shared();
        try (Lease r1 = a.lock("basic/rw", shared); Lease r2 = b.lock("basic/rw", shared)) {
            assertEquals(Lease.Mode.SHARED, r1.mode());
            assertTrue(Long.compareUnsigned(r2.token(), r1.token()) > 0);
            assertThrows(BusyException.class, () -> w.tryLock("basic/rw", TTL));
            assertEquals(2, w.status("basic/rw").holders());
        }
        LockOptions sem = LockOptions.ttl(TTL).limit(2);
        try (Lease p1 = a.lock("basic/sem", sem); Lease p2 = b.lock("basic/sem", sem)) {
            assertEquals(Lease.Mode.SEMAPHORE, p2.mode());
            assertThrows(BusyException.class, () -> w.tryLock("basic/sem", sem));
            LimitMismatchException e = assertThrows(LimitMismatchException.class, () -> w.tryLock("basic/sem", LockOptions.ttl(TTL).limit(3)));
            assertEquals(2, e.limit());
            assertThrows(LimitMismatchException.class, () -> w.tryLock("basic/sem", TTL));
            assertTrue(p1.isValid());
        }
        assertThrows(IllegalArgumentException.class, () -> LockOptions.ttl(TTL).limit(2).shared());
        assertThrows(IllegalArgumentException.class, () -> LockOptions.DEFAULT.limit(1));
    }

    @Test
    void deadlockIsRefused() throws Exception {
        DlockClient a = client(), b = client();
        try (Lease la = a.lock("basic/dl/a", TTL, null); Lease lb = b.lock("basic/dl/b", TTL, null)) {
            CompletableFuture<Lease> f = a.lockAsync("basic/dl/b", LockOptions.ttl(TTL));
            Daemons.eventually(Duration.ofSeconds(5), "a waits", () -> a.status("basic/dl/b").waiters() == 1);
            DeadlockException e = assertThrows(DeadlockException.class, () -> b.lock("basic/dl/a", TTL, Duration.ofSeconds(5)));
            assertEquals(2, e.owners());
            assertEquals("DEADLOCK", e.code());
            assertTrue(f.cancel(true));
            assertTrue(la.isValid() && lb.isValid());
        }
    }

    @Test
    void renewalKeepsTheLeasePastItsTtl() {
        DlockClient c = client();
        Lease l = c.lock("basic/renew", Duration.ofMillis(900), null);
        Daemons.sleep(2000);
        assertTrue(l.isValid(), "renewed: " + l.lostCause());
        assertFalse(l.atRisk());
        long rem = l.remaining().toMillis();
        assertTrue(rem > 0 && rem <= 900, "remaining " + rem);
        assertEquals(l.token(), c.status("basic/renew").token());
        l.unlock();
        // without renewal it ends at its TTL: lost, reported by the listener before the local deadline
        AtomicReference<LeaseLostException> lost = new AtomicReference<>();
        CountDownLatch told = new CountDownLatch(1);
        Lease n = c.lock("basic/norenew", LockOptions.ttl(Duration.ofMillis(600)).noRenew());
        n.onLost(e -> {
            lost.set(e);
            told.countDown();
        });
        Daemons.eventually(Duration.ofSeconds(5), "lost", () -> told.getCount() == 0);
        assertFalse(n.isValid());
        assertTrue(lost.get().reason() == LostReason.UNCONFIRMED || lost.get().reason() == LostReason.EXPIRED, lost.get().toString());
    }

    @Test
    void refreshShorter() {
        DlockClient c = client();
        Lease l = c.lock("basic/refresh", TTL, null);
        l.refresh(Duration.ofMillis(1500));
        long rem = l.remaining().toMillis();
        assertTrue(rem > 500 && rem <= 1500, "remaining " + rem);
        long srv = c.status("basic/refresh").ttl().toMillis();
        assertTrue(srv <= 1500 && srv >= rem - 100, "server's " + srv + ", ours " + rem);
        Daemons.sleep(1800); // renewed with the shorter TTL
        assertTrue(l.isValid());
        assertTrue(l.remaining().toMillis() <= 1500);
        l.unlock();
        assertThrows(NotHolderException.class, () -> l.refresh(null));
    }

    @Test
    void checkStaleAfterBreak() throws Exception {
        DlockClient c = client();
        Lease l = c.lock("basic/break", TTL, null);
        CompletableFuture<LeaseLostException> lost = l.lost();
        List<String> r = Daemons.raw(d.addr, "BREAK basic/break " + Long.toUnsignedString(l.token()) + " reason=test");
        assertTrue(r.get(0).startsWith("OK BROKEN"), r.toString());
        LeaseLostException e = lost.get(5, TimeUnit.SECONDS);
        assertEquals(LostReason.EXPIRED, e.reason());
        assertEquals("default", e.brokenBy());
        assertFalse(l.isValid());
        assertEquals(LostReason.EXPIRED, l.lostReason());
        LeaseLostException stale = assertThrows(LeaseLostException.class, l::check);
        assertEquals("STALE", stale.code());
        l.close(); // lost: nothing to release, no error
    }

    @Test
    void cancelGivesBackACrossedGrant() throws Exception {
        DlockClient a = client(), b = client(), x = client();
        for (int i = 0; i < 15; i++) {
            Lease l = a.lock("basic/cancel", TTL, null);
            CompletableFuture<Lease> f = b.lockAsync("basic/cancel", LockOptions.ttl(TTL));
            Daemons.eventually(Duration.ofSeconds(5), "b waits", () -> a.status("basic/cancel").waiters() == 1);
            a.engine().exec(() -> { }); // a's UNLOCK and b's CANCEL cross
            CompletableFuture<Void> un = CompletableFuture.runAsync(l::unlock);
            if (i % 3 != 0) Daemons.sleep(i % 5);
            boolean cancelled = f.cancel(true);
            un.get(5, TimeUnit.SECONDS);
            if (!cancelled) {
                f.get().unlock(); // it came first
            }
            // either way the lock is free again soon: nobody keeps a grant nobody wants
            Daemons.eventually(Duration.ofSeconds(5), "free after the cancel", () -> !x.status("basic/cancel").held());
            assertTrue(f.isDone());
        }
        x.tryLock("basic/cancel", TTL).close();
        int[] crossed = {0};
        b.engine().exec(() -> crossed[0] = b.engine().crossedGrants);
        System.err.println("cancelGivesBackACrossedGrant: " + crossed[0] + " grants crossed a CANCEL");
    }

    @Test
    void interruptCancelsTheWait() throws Exception {
        DlockClient a = client(), b = client();
        try (Lease l = a.lock("basic/interrupt", TTL, null)) {
            AtomicReference<Throwable> got = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    b.lock("basic/interrupt", TTL, null);
                } catch (RuntimeException e) {
                    got.set(e);
                }
            });
            t.start();
            Daemons.eventually(Duration.ofSeconds(5), "b waits", () -> a.status("basic/interrupt").waiters() == 1);
            t.interrupt();
            t.join(5000);
            assertTrue(got.get() instanceof DlockInterruptedException, String.valueOf(got.get()));
            Daemons.eventually(Duration.ofSeconds(5), "the wait cancelled", () -> a.status("basic/interrupt").waiters() == 0);
            assertTrue(l.isValid());
        }
    }

    @Test
    void lockAdapter() throws Exception {
        DlockClient a = client(), b = client();
        DlockLock la = a.newLock("basic/adapter", TTL), lb = b.newLock("basic/adapter", TTL);
        la.lock();
        la.lock(); // reentrant per thread
        long tok = la.token();
        assertTrue(la.isValid());
        assertFalse(lb.tryLock());
        assertFalse(lb.tryLock(200, TimeUnit.MILLISECONDS));
        // another thread of the same client waits for the release
        DlockLock same = a.newLock("basic/adapter", TTL);
        assertFalse(CompletableFuture.supplyAsync(same::tryLock).get(5, TimeUnit.SECONDS));
        assertThrows(IllegalMonitorStateException.class, () -> {
            try {
                CompletableFuture.runAsync(la::unlock).get();
            } catch (java.util.concurrent.ExecutionException e) {
                throw e.getCause();
            }
        });
        la.unlock();
        assertTrue(la.isHeldByCurrentThread());
        la.unlock();
        assertFalse(la.isHeldByCurrentThread());
        assertThrows(IllegalMonitorStateException.class, la::unlock);
        assertTrue(lb.tryLock(5, TimeUnit.SECONDS));
        assertTrue(Long.compareUnsigned(lb.token(), tok) > 0);
        assertThrows(UnsupportedOperationException.class, lb::newCondition);
        // lockInterruptibly: an interrupt ends the wait
        Thread t = new Thread(() -> {
            try {
                la.lockInterruptibly();
                fail("granted");
            } catch (InterruptedException e) {
                // expected
            }
        });
        t.start();
        Daemons.eventually(Duration.ofSeconds(5), "waits", () -> b.status("basic/adapter").waiters() == 1);
        t.interrupt();
        t.join(5000);
        assertFalse(t.isAlive());
        lb.unlock();
        la.lockInterruptibly();
        la.unlock();
    }

    @Test
    void watchEvents() throws Exception {
        DlockClient a = client(), o = client();
        try (Watch w = o.watch("basic/watch/*")) {
            Lease l = a.lock("basic/watch/x", TTL, null);
            WatchEvent e = w.poll(Duration.ofSeconds(5));
            assertNotNull(e);
            assertEquals(WatchEvent.Kind.GRANTED, e.kind());
            assertEquals("basic/watch/x", e.name());
            assertEquals(a.owner(), e.owner());
            assertEquals(l.token(), e.token());
            assertEquals(1, e.holders());
            l.unlock();
            e = w.poll(Duration.ofSeconds(5));
            assertEquals(WatchEvent.Kind.RELEASED, e.kind());
            assertEquals(0, e.holders());
            Lease m = a.lock("basic/watch/y", TTL, null);
            assertEquals(WatchEvent.Kind.GRANTED, w.poll(Duration.ofSeconds(5)).kind());
            o.breakLease("basic/watch/y", m.token(), "watch");
            LeaseLostException stale = assertThrows(LeaseLostException.class, () -> o.breakLease("basic/watch/y", m.token(), "again"));
            assertEquals("STALE", stale.code());
            assertThrows(LeaseLostException.class, () -> o.check("basic/watch/y", m.token()));
            assertThrows(IllegalArgumentException.class, () -> o.breakLease("basic/watch/y", m.token(), "two words"));
            e = w.poll(Duration.ofSeconds(5));
            assertEquals(WatchEvent.Kind.BROKEN, e.kind());
            assertEquals("default", e.brokenBy());
            a.lock("basic/other", TTL, null).close();
            assertNull(w.poll(Duration.ofMillis(200)));
        }
        assertThrows(IllegalArgumentException.class, () -> o.watch("a b"));
        assertThrows(IllegalArgumentException.class, () -> o.watch());
    }

    @Test
    void invalidArgumentsAreRefusedBeforeSending() {
        DlockClient c = client();
        for (String bad : new String[] {"", "a b", "a=b", "x".repeat(256), "caf\u00e9", "tab\there"}) {
            assertThrows(IllegalArgumentException.class, () -> c.tryLock(bad, TTL), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> LockOptions.ttl(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> Daemons.client(d.addr).owner("a b").build());
        assertThrows(IllegalArgumentException.class, () -> Daemons.client(d.addr).ownerKey("short").build());
        assertThrows(IllegalArgumentException.class, () -> Daemons.client("h:0").build());
        assertThrows(IllegalArgumentException.class, () -> Daemons.client(d.addr).cluster("xyz").build());
        c.ping();
    }

    @Test
    void ownerKeyReuseRefusedToAnotherKey() {
        DlockClient a = Daemons.client(d.addr).owner("basic-shared").build();
        clients.add(a);
        try (Lease l = a.lock("basic/owner", TTL, null)) {
            DeniedException e = assertThrows(DeniedException.class,
                    () -> Daemons.client(d.addr).owner("basic-shared").ownerKey("0123456789abcdef0123").build());
            assertEquals("DENIED", e.code());
            assertThrows(DeniedException.class, () -> Daemons.client(d.addr).owner("basic-shared").build());
            // the same id and key is the same owner: it may release the lease
            try (DlockClient b = Daemons.client(d.addr).owner("basic-shared=" + a.ownerKey()).build()) {
                assertEquals(a.ownerKey(), b.ownerKey());
                assertEquals(a.owner(), b.status("basic/owner").owner());
                assertThrows(HeldByOwnerException.class, () -> b.tryLock("basic/owner", TTL));
            }
            assertTrue(l.isValid());
        }
    }

    @Test
    void noThreadLeftAfterClose() throws Exception {
        DlockClient c = Daemons.client(d.addr).build();
        Lease l = c.lock("basic/threads", TTL, null);
        Watch w = c.watch("basic/threads");
        CompletableFuture<LeaseLostException> lost = l.lost();
        assertFalse(Daemons.threadsOf(c).isEmpty());
        c.close();
        assertEquals(List.of(), Daemons.threadsOf(c));
        assertEquals(LostReason.CLIENT_CLOSED, lost.get(1, TimeUnit.SECONDS).reason());
        assertFalse(l.isValid());
        assertThrows(ClientClosedException.class, c::ping);
        assertThrows(ClientClosedException.class, () -> w.poll(Duration.ofMillis(10)));
        // the lease was not released: it ends at the server by its TTL
        DlockClient o = client();
        assertTrue(o.status("basic/threads").held());
        // a client that never connected leaves no thread either
        UnavailableException e = assertThrows(UnavailableException.class,
                () -> Daemons.client("127.0.0.1:" + Daemons.freePort()).connectTimeout(Duration.ofMillis(300)).build());
        assertTrue(e.getMessage().contains("127.0.0.1"), e.getMessage());
    }
}
