package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A scripted server that says what no dlockd may: the client drops it and goes on. */
@Timeout(20)
class FakeServerTest {
    /** Answers each request line with what script(connection number, line) returns (raw bytes, CRLF added). */
    static final class Fake implements AutoCloseable {
        final ServerSocket ss;
        final AtomicInteger conns = new AtomicInteger();
        final List<String> seen = new CopyOnWriteArrayList<>();
        final List<Socket> socks = new CopyOnWriteArrayList<>();
        final Thread t;

        Fake(BiFunction<Integer, String, String> script) throws IOException {
            ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            t = new Thread(() -> {
                while (true) {
                    Socket s;
                    try {
                        s = ss.accept();
                    } catch (IOException e) {
                        return;
                    }
                    socks.add(s);
                    int n = conns.incrementAndGet();
                    Thread h = new Thread(() -> serve(s, n, script), "fake-conn");
                    h.setDaemon(true);
                    h.start();
                }
            }, "fake-accept");
            t.setDaemon(true);
            t.start();
        }

        void serve(Socket s, int n, BiFunction<Integer, String, String> script) {
            try (s) {
                BufferedReader r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.ISO_8859_1));
                OutputStream o = s.getOutputStream();
                String line;
                while ((line = r.readLine()) != null) {
                    seen.add(n + " " + line);
                    String out = script.apply(n, line);
                    if (out == null) out = line.startsWith("HELLO") ? hello(line) : "ERR UNKNOWN_COMMAND no";
                    if (out.equals("-")) continue; // no reply
                    o.write((out + "\r\n").getBytes(StandardCharsets.ISO_8859_1));
                    o.flush();
                }
            } catch (IOException e) {
                // the client dropped it
            }
        }

        static String hello(String line) {
            String owner = "x";
            for (String w : line.split(" ")) if (w.startsWith("owner=")) owner = w.substring(6);
            return "OK HELLO version=0.4.0 owner=" + owner + " key=0123456789abcdef0123 user=default auth=none role=active cluster=-";
        }

        String addr() {
            return "127.0.0.1:" + ss.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            ss.close();
            for (Socket s : socks) s.close();
        }
    }

    @Test
    void aLineTooLongIsDroppedAndTheRequestSentAgain() throws Exception {
        try (Fake f = new Fake((n, l) -> l.startsWith("PING") ? (n == 1 ? "OK " + "x".repeat(70000) : "OK PONG") : null);
             DlockClient c = Daemons.client(f.addr()).build()) {
            c.ping();
            assertEquals(2, f.conns.get(), f.seen.toString());
        }
    }

    @Test
    void aLineOutsideTheProtocolIsDropped() throws Exception {
        try (Fake f = new Fake((n, l) -> l.startsWith("PING") ? (n == 1 ? "OK PONG \u00e9\u0001" : "OK PONG") : null);
             DlockClient c = Daemons.client(f.addr()).build()) {
            c.ping();
            assertEquals(2, f.conns.get());
        }
    }

    @Test
    void aGrantOfAnotherLockOrALongerTtlIsAProtocolError() throws Exception {
        try (Fake f = new Fake((n, l) -> {
            if (l.startsWith("LOCK a ")) return "OK GRANTED b 5 1000 holds=1";
            if (l.startsWith("LOCK c ")) return "OK GRANTED c 6 99000 holds=1";
            if (l.startsWith("UNLOCK")) return "OK RELEASED c";
            return null;
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            assertThrows(DlockProtocolException.class, () -> c.lock("a", Duration.ofSeconds(1), Duration.ofSeconds(1)));
            assertThrows(DlockProtocolException.class, () -> c.lock("c", Duration.ofSeconds(1), Duration.ofSeconds(1)));
            Daemons.eventually(Duration.ofSeconds(5), "the grant nobody may make given back",
                    () -> f.seen.stream().anyMatch(s -> s.contains("UNLOCK c 6")));
            assertTrue(f.conns.get() >= 2, "dropped");
        }
    }

    @Test
    void aValueIsSentAsATextValue() throws Exception {
        try (Fake f = new Fake((n, l) -> {
            if (l.startsWith("LOCK e ")) return "OK GRANTED e 5 9000 holds=1";
            if (l.startsWith("REFRESH e 5 ")) return "OK REFRESHED e 9000";
            if (l.startsWith("UNLOCK e 5")) return "OK RELEASED e";
            return null;
        }); DlockClient c = Daemons.client(f.addr()).build()) {
            // printable ASCII kept, ' ' and '%' escaped, any other byte (of UTF-8) '?'
            Lease l = c.lock("e", LockOptions.ttl(Duration.ofSeconds(10)).value("a b%c\u00e9"));
            assertTrue(f.seen.stream().anyMatch(x -> x.startsWith("1 LOCK e ") && x.contains(" value=a%20b%25c?? ")), f.seen.toString());
            // cut at 128 bytes as sent, never inside an escape: 42 escapes (126), not a 43rd
            l.proclaim(" ".repeat(50) + "z");
            String v = " value=" + "%20".repeat(42) + " id=";
            assertTrue(f.seen.stream().anyMatch(x -> x.startsWith("1 REFRESH e 5 ttl=10000") && x.contains(v)), f.seen.toString());
            long sent = f.seen.stream().filter(x -> x.contains(" value=")).count();
            assertThrows(IllegalArgumentException.class, () -> l.proclaim(""));
            l.refresh(null); // after it, in order: had it sent anything, it would be seen by now
            assertEquals(sent, f.seen.stream().filter(x -> x.contains(" value=")).count(), "nothing sent");
            l.unlock();
        }
    }

    @Test
    void noReplyInTimeIsATimeout() throws Exception {
        try (Fake f = new Fake((n, l) -> l.startsWith("STATUS") ? "-" : null);
             DlockClient c = Daemons.client(f.addr()).serverTimeout(Duration.ofMillis(300)).build()) {
            long t0 = System.nanoTime();
            assertThrows(LockTimeoutException.class, () -> c.status("s"));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= 250 && ms < 5000, ms + " ms");
            assertEquals(1, f.conns.get());
        }
    }
}
