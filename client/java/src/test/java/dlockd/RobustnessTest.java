package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** What an outside attack found: hung servers, hostile replies, reconnect storms (a fake server, or real daemons). */
@Timeout(60)
class RobustnessTest {
    /** A fake server that also answers PING. */
    static FakeServerTest.Fake fake(java.util.function.BiFunction<Integer, String, String> script) throws java.io.IOException {
        return new FakeServerTest.Fake((n, l) -> {
            String r = script.apply(n, l);
            return r == null && l.startsWith("PING") ? "OK PONG" : r;
        });
    }

    static String tagOf(String line) {
        for (String w : line.split(" ")) if (w.startsWith("id=")) return w.substring(3);
        return "";
    }

    /** F1: the active daemon is SIGSTOPped: requests go unanswered, the client moves on to the standby. */
    @Test
    void aHungActiveIsLeftForTheStandby() throws Exception {
        try (Daemons ds = new Daemons()) {
            Cluster cl = new Cluster(ds);
            try (DlockClient c = Daemons.client(cl.servers).serverTimeout(Duration.ofSeconds(1))
                    .connectTimeout(Duration.ofSeconds(2)).build()) {
                Lease l = c.lock("hang", Duration.ofSeconds(25), null);
                cl.a.signal("STOP");
                try {
                    assertThrows(LockTimeoutException.class, c::ping); // unanswered: the connection is dropped
                    Daemons.eventually(Duration.ofSeconds(30), "the lease confirmed at node b", () -> {
                        try {
                            l.check();
                            return true;
                        } catch (DlockException e) {
                            return false;
                        }
                    });
                    assertNull(l.lostCause());
                    assertTrue(l.isValid());
                    c.ping();
                    assertEquals(l.token(), c.status("hang").token());
                    assertEquals("active", Daemons.role(cl.b.addr));
                    l.unlock();
                } finally {
                    cl.a.signal("CONT");
                }
            }
        }
    }

    /** Threads of one client share its connection: each reads it for all while it waits, hands over, and none hangs. */
    @Test
    void threadsOfOneClientShareTheReading() throws Exception {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient c = Daemons.client(d.addr).build(); DlockClient o = Daemons.client(d.addr).build()) {
                Lease held = o.lock("share/busy", Duration.ofSeconds(10), null);
                Lease heldLong = o.lock("share/long", Duration.ofSeconds(10), null);
                CompletableFuture<Lease> waiter = c.lockAsync("share/busy", LockOptions.ttl(Duration.ofSeconds(10)));
                List<CompletableFuture<Integer>> fs = new ArrayList<>();
                for (int t = 0; t < 6; t++) {
                    String name = "share/" + t;
                    fs.add(CompletableFuture.supplyAsync(() -> {
                        int n = 0;
                        for (int i = 0; i < 150; i++) {
                            try (Lease l = c.lock(name, LockOptions.ttl(Duration.ofSeconds(5)).waitFor(Duration.ofSeconds(5)))) {
                                if (i % 10 == 0) l.check();
                                n++;
                            }
                            if (i % 50 == 0) c.ping();
                        }
                        return n;
                    }, java.util.concurrent.Executors.newSingleThreadExecutor()));
                }
                // a thread that waits long in the queue while the others come and go
                CompletableFuture<Lease> longWait = CompletableFuture.supplyAsync(() -> c.lock("share/long", LockOptions.ttl(Duration.ofSeconds(5))));
                for (CompletableFuture<Integer> f : fs) assertEquals(150, f.get(30, TimeUnit.SECONDS));
                assertTrue(!waiter.isDone());
                assertTrue(!longWait.isDone());
                held.unlock();
                heldLong.unlock();
                Lease w = waiter.get(5, TimeUnit.SECONDS); // an event read by whoever reads
                w.unlock();
                longWait.get(5, TimeUnit.SECONDS).unlock();
            }
        }
    }

    /** F3: a lockAsync cancelled while its grant's confirmation is in flight, then a drop: the hold is given back. */
    @Test
    void aCancelledGrantIsGivenBackAfterADrop() throws Exception {
        try (FakeServerTest.Fake f = fake((n, l) -> {
            if (l.startsWith("LOCK f ")) {
                String t = tagOf(l);
                return "OK QUEUED f 1 id=" + t + "\r\n* GRANTED f 9 5000 holds=1 id=" + t;
            }
            if (l.startsWith("REFRESH f 9")) return "-"; // never confirmed
            if (l.startsWith("UNLOCK f 9")) return "OK RELEASED f";
            return null;
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            CompletableFuture<Lease> lf = c.lockAsync("f", LockOptions.ttl(Duration.ofSeconds(5)));
            Daemons.eventually(Duration.ofSeconds(5), "the confirmation sent", () -> f.seen.stream().anyMatch(s -> s.startsWith("1 REFRESH f 9")));
            assertTrue(lf.cancel(true));
            Daemons.sleep(100);
            f.socks.get(0).close(); // the connection drops under the confirmation
            Daemons.eventually(Duration.ofSeconds(10), "the hold given back after the reconnect",
                    () -> f.seen.stream().anyMatch(s -> s.startsWith("2 UNLOCK f 9")));
            c.ping();
        }
    }

    /** F7: a HOLDERS body of more than 4 MiB is a protocol error (never buffered whole). */
    @Test
    void aHugeBodyIsAProtocolError() throws Exception {
        String big = "x".repeat(60000);
        try (FakeServerTest.Fake f = fake((n, l) -> {
            if (!l.startsWith("HOLDERS")) return null;
            if (n > 1) return "OK HOLDERS h 0 holders=0 waiters=0 mode=- limit=1 more=0";
            StringBuilder b = new StringBuilder("OK HOLDERS h 100 holders=100 waiters=0 mode=exclusive limit=1 more=0");
            for (int i = 0; i < 100; i++) b.append("\r\nholder o").append(i).append(" token=1 cmd=").append(big);
            return b.toString();
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            assertThrows(DlockProtocolException.class, () -> c.holders("h"));
            Daemons.eventually(Duration.ofSeconds(5), "dropped", () -> f.conns.get() >= 2);
            assertEquals(0, c.holders("h").holders().size());
        }
    }

    /** F8: a TRYLOCK answered OK QUEUED is a protocol error, not a wait until close. */
    @Test
    void aQueuedTryLockIsAProtocolError() throws Exception {
        try (FakeServerTest.Fake f = fake((n, l) -> l.startsWith("TRYLOCK") ? "OK QUEUED t 1" : null);
             DlockClient c = Daemons.client(f.addr()).serverTimeout(Duration.ofSeconds(30)).build()) {
            CompletableFuture<Object> r = CompletableFuture.supplyAsync(() -> c.tryLock("t", Duration.ofSeconds(5)));
            ExecutionException e = assertThrows(ExecutionException.class, () -> r.get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof DlockProtocolException, e.getCause().toString());
        }
    }

    /** F9: an UNLOCK always answered OK HELD is sent again a few times, then given up as unconfirmed. */
    @Test
    void anUnlockAlwaysHeldIsNotResentForever() throws Exception {
        try (FakeServerTest.Fake f = fake((n, l) -> {
            if (l.startsWith("TRYLOCK u ")) return "OK GRANTED u 7 10000 holds=1";
            if (l.startsWith("UNLOCK u 7")) return "OK HELD u 1";
            return null;
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            Lease l = c.tryLock("u", Duration.ofSeconds(10));
            CompletableFuture<Void> un = CompletableFuture.runAsync(l::unlock);
            ExecutionException e = assertThrows(ExecutionException.class, () -> un.get(5, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof UnconfirmedException, e.getCause().toString());
            assertTrue(!l.isValid());
            Daemons.sleep(200);
            long n = f.seen.stream().filter(s -> s.contains("UNLOCK u 7")).count();
            assertTrue(n >= 2 && n <= 5, n + " UNLOCKs");
            c.ping();
        }
    }

    /** F6: a server that answers HELLO and then a bad line is not reconnected to without a backoff. */
    @Test
    void noReconnectStormAfterABadSession() throws Exception {
        try (FakeServerTest.Fake f = fake((n, l) -> l.startsWith("HELLO") && !l.contains("host=")
                ? FakeServerTest.Fake.hello(l) + "\r\nnot the protocol" : null)) {
            try (DlockClient c = Daemons.client(f.addr()).build()) {
                int before = f.conns.get();
                assertTrue(c.owner().startsWith("java-"));
                Daemons.sleep(2000);
                int n = f.conns.get() - before;
                assertTrue(n <= 12, n + " connections in 2 s");
            }
        }
    }

    /** A unix socket whose connect hangs (a full backlog) is given up at the connect timeout: the next server is tried. */
    @Test
    void aHungUnixConnectTimesOut() throws Exception {
        Path dir = Files.createTempDirectory("dlockd-java-unix");
        Path sock = dir.resolve("full.sock");
        List<SocketChannel> fill = new ArrayList<>();
        try (ServerSocketChannel ss = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
             FakeServerTest.Fake f = fake((n, l) -> null)) {
            ss.bind(UnixDomainSocketAddress.of(sock), 1);
            for (int i = 0; i < 64; i++) {
                SocketChannel x = SocketChannel.open(StandardProtocolFamily.UNIX);
                x.configureBlocking(false);
                fill.add(x);
                try {
                    if (!x.connect(UnixDomainSocketAddress.of(sock))) break;
                } catch (java.io.IOException e) {
                    break; // full
                }
            }
            long t0 = System.nanoTime();
            try (DlockClient c = new DlockClient.Builder(java.util.Map.of()).servers(sock + "," + f.addr())
                    .connectTimeout(Duration.ofSeconds(4)).build()) {
                c.ping();
            }
            long ms = (System.nanoTime() - t0) / 1_000_000;
            System.err.println("aHungUnixConnectTimesOut: connected to the second server after " + ms + " ms");
            assertTrue(ms < 6000, ms + " ms");
        } finally {
            for (SocketChannel x : fill) x.close();
            Files.deleteIfExists(sock);
            Files.deleteIfExists(dir);
        }
    }
}
