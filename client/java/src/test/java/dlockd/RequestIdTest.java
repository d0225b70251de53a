package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Request ids (LOCK req=): a LOCK sent again after a drop gets the grant its lost reply told of. */
@Timeout(60)
class RequestIdTest {
    /**
     * A forwarding proxy between clients and a daemon that can lose what the daemon says ({@link #discardDown}) and
     * cut the connections ({@link #cut}): a LOCK whose reply a drop lost, as a client sees it. Each new connection is
     * forwarded whole again.
     */
    static final class Proxy implements AutoCloseable {
        final ServerSocket ss;
        final int upstream;
        volatile boolean discardDown;
        final List<Socket> open = new CopyOnWriteArrayList<>();
        final Thread t;

        Proxy(int upstream) throws IOException {
            this.upstream = upstream;
            ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            t = new Thread(() -> {
                while (true) {
                    Socket cs, us;
                    try {
                        cs = ss.accept();
                    } catch (IOException e) {
                        return;
                    }
                    us = new Socket();
                    try {
                        us.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), upstream), 5000);
                    } catch (IOException e) {
                        close(cs);
                        close(us);
                        continue;
                    }
                    open.add(cs);
                    open.add(us);
                    pump(cs, us, false);
                    pump(us, cs, true);
                }
            }, "proxy-accept");
            t.setDaemon(true);
            t.start();
        }

        private void pump(Socket from, Socket to, boolean down) {
            Thread p = new Thread(() -> {
                byte[] buf = new byte[4096];
                try {
                    InputStream in = from.getInputStream();
                    OutputStream out = to.getOutputStream();
                    int n;
                    while ((n = in.read(buf)) > 0) {
                        if (down && discardDown) continue; // lost on the way
                        out.write(buf, 0, n);
                        out.flush();
                    }
                } catch (IOException e) {
                    // cut, or closed by either side
                }
                close(from);
                close(to);
            }, down ? "proxy-down" : "proxy-up");
            p.setDaemon(true);
            p.start();
        }

        private static void close(Socket s) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closed
            }
        }

        /** Cuts every connection open now. */
        void cut() {
            for (Socket s : open) close(s);
            open.clear();
        }

        String addr() {
            return "127.0.0.1:" + ss.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            ss.close();
            cut();
        }
    }

    static String kv(String line, String key) {
        for (String w : line.split(" ")) if (w.startsWith(key + "=")) return w.substring(key.length() + 1);
        return null;
    }

    /**
     * Before request ids, the LOCK sent again after the drop found the hold its lost reply told of, was granted as a
     * reentry (holds=2), and failed with HeldByOwnerException while that hold kept the lock busy for a TTL. Now it
     * gets its grant back: one hold, and one unlock frees the lock.
     */
    @Test
    void aLockWhoseReplyADropLostGetsItsGrantBack() throws Exception {
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (Proxy p = new Proxy(d.port); DlockClient c = Daemons.client(p.addr()).owner("req-owner").build()) {
                p.discardDown = true;
                CompletableFuture<Lease> f = CompletableFuture.supplyAsync(
                        () -> c.lock("rq", LockOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(8))), ex);
                // granted at the server, the reply lost on the way
                Daemons.eventually(Duration.ofSeconds(5), "rq held at the server",
                        () -> Daemons.raw(d.addr, "STATUS rq").get(0).contains("state=held"));
                p.discardDown = false;
                p.cut();
                Lease l = f.get(20, TimeUnit.SECONDS);
                String st = Daemons.raw(d.addr, "STATUS rq").get(0);
                assertEquals(Long.toUnsignedString(l.token()), kv(st, "token"), st);
                assertEquals("1", kv(st, "count"), st);
                assertTrue(l.isValid());
                l.unlock();
                String other = Daemons.raw(d.addr, "HELLO owner=req-other", "TRYLOCK rq").get(1);
                assertTrue(other.startsWith("OK GRANTED rq "), "freed by one unlock: " + other);
            }
        } finally {
            ex.shutdownNow();
        }
    }

    /** 0.4.0 and later take req=; 0.3 and what is no version do not. */
    @Test
    void theVersionsThatTakeRequestIds() {
        for (String v : new String[] {"0.4.0", "0.4", "0.10.1", "1.0.0", "2.3.4-rc1", "0.4.0+x"}) {
            assertTrue(Wire.takesReq(v), v);
        }
        for (String v : new String[] {"0.3.9", "0.0.1", "0", "", ".4.0", "x.4.0", "0.x", "0.", "v0.4.0"}) {
            assertFalse(Wire.takesReq(v), v);
        }
        assertFalse(Wire.takesReq(null));
    }

    /**
     * The id is decided per connection: sent to a server of 0.4.0, not to a 0.3 one met after a drop, and the same
     * again on the next 0.4.0 one. Another acquire draws another id.
     */
    @Test
    void theSameIdOnEveryWriteToAServerThatTakesIt() throws Exception {
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            if (l.startsWith("HELLO") && !l.contains("host=")) {
                String h = FakeServerTest.Fake.hello(l);
                return n == 2 ? h.replace("version=0.4.0", "version=0.3.2") : h;
            }
            if (l.startsWith("LOCK r ")) return n < 3 ? "-" : "OK GRANTED r 5 10000 holds=1 id=" + RobustnessTest.tagOf(l);
            if (l.startsWith("TRYLOCK s ")) return "OK GRANTED s 6 10000 holds=1 id=" + RobustnessTest.tagOf(l);
            if (l.startsWith("REFRESH")) return "OK REFRESHED " + l.split(" ")[1] + " 10000 id=" + RobustnessTest.tagOf(l);
            if (l.startsWith("UNLOCK")) return "OK RELEASED " + l.split(" ")[1] + " id=" + RobustnessTest.tagOf(l);
            if (l.startsWith("PING")) return "OK PONG";
            return null;
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            CompletableFuture<Lease> lf = c.lockAsync("r", LockOptions.ttl(Duration.ofSeconds(10)).notifyWaiters());
            Daemons.eventually(Duration.ofSeconds(5), "LOCK on 1", () -> lockOn(f, 1) != null);
            f.socks.get(0).close();
            Daemons.eventually(Duration.ofSeconds(5), "LOCK on 2", () -> lockOn(f, 2) != null);
            f.socks.get(1).close();
            Lease l = lf.get(10, TimeUnit.SECONDS);
            String l1 = lockOn(f, 1), l2 = lockOn(f, 2), l3 = lockOn(f, 3);
            assertNotNull(l3, f.seen.toString());
            String id = kv(l1, "req");
            assertNotNull(id, l1);
            assertNotEquals(0L, Long.parseUnsignedLong(id), l1);
            assertNull(kv(l2, "req"), "a 0.3 server is sent no req=: " + l2);
            assertEquals(id, kv(l3, "req"), l3);
            for (String x : new String[] {l1, l2, l3}) assertEquals("waiters", kv(x, "notify"), x);
            Lease s = c.tryLock("s", Duration.ofSeconds(10));
            String ls = null;
            for (String x : f.seen) if (x.startsWith("3 TRYLOCK s ")) ls = x;
            assertNotNull(ls, f.seen.toString());
            assertNotNull(kv(ls, "req"), ls);
            assertNotEquals(id, kv(ls, "req"), "another acquire, another id");
            assertNull(kv(ls, "notify"), ls);
            s.unlock();
            l.unlock();
        }
    }

    /** The LOCK of r written on connection n, or null. */
    static String lockOn(FakeServerTest.Fake f, int n) {
        for (String x : f.seen) if (x.startsWith(n + " LOCK r ")) return x.substring(x.indexOf(' ') + 1);
        return null;
    }
}
