package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** News of waiters (LOCK notify=waiters, * WAITING): listeners and Lease.waiters(), against the real daemon. */
@Timeout(60)
class WaitersTest {
    /** A raw connection of another owner, kept open (its LOCK waits in the queue while it is). */
    static final class Raw implements AutoCloseable {
        final Socket s = new Socket();
        final BufferedReader r;
        final OutputStream o;

        Raw(String addr, String owner) throws IOException {
            String[] hp = addr.split(":");
            s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
            s.setSoTimeout(10000);
            r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
            o = s.getOutputStream();
            assertTrue(call("HELLO owner=" + owner).startsWith("OK HELLO "));
        }

        /** The first line that is not an event. */
        String call(String line) throws IOException {
            o.write((line + "\r\n").getBytes(StandardCharsets.US_ASCII));
            o.flush();
            while (true) {
                String x = r.readLine();
                if (x == null) throw new IOException(line + ": closed");
                if (!x.startsWith("* ")) return x;
            }
        }

        @Override
        public void close() throws IOException {
            s.close();
        }
    }

    record Told(Lease lease, int n, int waitersThen, boolean lockHeld) {}

    @Test
    void aHolderThatAskedIsToldWhenOthersWait() throws Exception {
        List<Told> client = new CopyOnWriteArrayList<>(), own = new CopyOnWriteArrayList<>();
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient c = Daemons.client(d.addr).onContended((l, n) -> client.add(
                    new Told(l, n, l.waiters(), l.c.mu.isHeldByCurrentThread()))).build();
                 Raw w1 = new Raw(d.addr, "w1"); Raw w2 = new Raw(d.addr, "w2")) {
                Lease l = c.lock("cache", LockOptions.ttl(Duration.ofSeconds(30)).notifyWaiters());
                l.onContended(n -> own.add(new Told(l, n, l.waiters(), c.engine().mu.isHeldByCurrentThread())));
                assertEquals(0, l.waiters());
                assertEquals("OK QUEUED cache 1", w1.call("LOCK cache"));
                Daemons.eventually(Duration.ofSeconds(5), "told of 1", () -> own.size() == 1 && client.size() == 1);
                assertEquals(1, l.waiters());
                assertEquals(new Told(l, 1, 1, false), own.get(0));
                assertEquals(1, client.get(0).n());
                assertEquals(l, client.get(0).lease());
                assertEquals(1, client.get(0).waitersThen());
                assertEquals("OK QUEUED cache 2", w2.call("LOCK cache"));
                Daemons.eventually(Duration.ofSeconds(5), "told of 2", () -> own.size() == 2 && client.size() == 2);
                assertEquals(2, l.waiters());
                assertEquals(2, own.get(1).n());
                assertEquals(2, client.get(1).n());

                // a lease that did not ask hears nothing
                Lease plain = c.lock("plain", Duration.ofSeconds(30), null);
                List<Integer> plainTold = new CopyOnWriteArrayList<>();
                plain.onContended(plainTold::add);
                assertEquals("OK QUEUED plain 1", w1.call("LOCK plain"));
                Daemons.sleep(200);
                assertEquals(0, plain.waiters());
                assertTrue(plainTold.isEmpty(), plainTold.toString());
                assertEquals(2, client.size(), client.toString());

                // a listener added late hears the last news at once
                CompletableFuture<Integer> late = new CompletableFuture<>();
                l.onContended(late::complete);
                assertEquals(2, late.get(5, TimeUnit.SECONDS));
                l.unlock();
                plain.unlock();
                assertEquals(2, own.size()); // nothing more for a lease given back
            }
        }
        // never called with the client's lock held
        for (Told t : client) assertFalse(t.lockHeld(), t.toString());
    }

    /**
     * A waiter's grant is told of the requests behind it right after its * GRANTED, before the CONFIRM of the grant is
     * answered and the lease made: the count is kept for the lease.
     */
    @Test
    void aWaiterThatAskedHearsOfThoseBehindItOnceGranted() throws Exception {
        List<Told> client = new CopyOnWriteArrayList<>();
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            try (DlockClient c = Daemons.client(d.addr).onContended((l, n) -> client.add(new Told(l, n, l.waiters(), false))).build();
                 Raw a = new Raw(d.addr, "holder"); Raw behind = new Raw(d.addr, "behind")) {
                String g = a.call("LOCK y ttl=10000");
                assertTrue(g.startsWith("OK GRANTED y "), g);
                String token = g.split(" ")[3];
                CompletableFuture<Lease> lf = c.lockAsync("y", LockOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(10)).notifyWaiters());
                Daemons.eventually(Duration.ofSeconds(5), "queued", () -> Daemons.raw(d.addr, "STATUS y").get(0).contains(" waiters=1 "));
                assertEquals("OK QUEUED y 2", behind.call("LOCK y ttl=5000"));
                assertTrue(client.isEmpty(), "not told while it waits: " + client);
                assertTrue(a.call("UNLOCK y " + token).startsWith("OK RELEASED y"));
                Lease l = lf.get(10, TimeUnit.SECONDS);
                Daemons.eventually(Duration.ofSeconds(5), "told of 1", () -> client.size() == 1);
                assertEquals(l, client.get(0).lease());
                assertEquals(1, client.get(0).n());
                assertEquals(1, l.waiters());
                CompletableFuture<Integer> own = new CompletableFuture<>();
                l.onContended(own::complete); // after the news: heard at once
                assertEquals(1, own.get(5, TimeUnit.SECONDS));
                l.unlock();
            }
        }
    }
}
