package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * A partitioned service: three real daemons (partitions p0, p1, p2) on one redis-server, the slots split in three
 * (p0 0-5460, p1 5461-10922, p2 10923-16383), and clients given p0's daemon only: each name goes to its partition's
 * daemon, multi-locks under one tag, MOVED followed after the map changed, and leases and waiters that follow their
 * slot when it moves to another partition with its locks. The map changes (the last tests move slots) run last.
 */
@Timeout(90)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class PartitionTest {
    static final Duration SETTLE = Duration.ofSeconds(15);
    static final LockOptions TTL = LockOptions.ttl(Duration.ofSeconds(10));

    Daemons ds;
    Daemons.Proc redis, p0, p1, p2;

    /** A daemon of partition id on the test's redis-server, listening. */
    Daemons.Proc part(String id) {
        return part(ds, redis, id);
    }

    /** A daemon of partition id on redis, listening (one of ds's). */
    static Daemons.Proc part(Daemons ds, Daemons.Proc redis, String id) {
        Path sd = ds.dir.resolve("state-" + id);
        try {
            Files.createDirectories(sd);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return ds.startListening("dlockd-" + id, " ready (", port -> {
            Path conf = ds.dir.resolve(id + "-" + port + ".conf");
            try {
                Files.writeString(conf, "[persistence]\npersist = redis\nredis = redis://127.0.0.1:" + redis.port
                        + "/0\nredis_prefix = t:\n[partition]\nid = " + id + "\n");
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            return List.of(Daemons.bin(), "-c", conf.toString(), "--port", String.valueOf(port), "-l", "info",
                    "--state-dir", sd.toString());
        });
    }

    /** MAP on a connection of its own: the header line, then its body. */
    static List<String> map(String addr) {
        String[] hp = addr.split(":");
        List<String> out = new ArrayList<>();
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
            s.setSoTimeout(10000);
            BufferedReader r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
            OutputStream o = s.getOutputStream();
            o.write("MAP\r\n".getBytes(StandardCharsets.US_ASCII));
            o.flush();
            String h = r.readLine();
            assertNotNull(h, "MAP: connection closed");
            assertTrue(h.startsWith("OK MAP "), h);
            out.add(h);
            int n = Integer.parseInt(h.split(" ")[3]);
            for (int i = 0; i < n; i++) out.add(r.readLine());
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out;
    }

    static long epochOf(String addr) {
        return Long.parseLong(map(addr).get(0).split(" ")[2]);
    }

    /** PARTITION MOVE on daemon d (slots with locks or without: the locks go along); returns the map's new epoch. */
    static long move(Daemons.Proc d, String slots, String to) {
        String[] last = new String[1];
        // a partition gives slots again once the receiver of its last move with locks imported them
        Daemons.eventually(SETTLE, "PARTITION MOVE " + slots + " " + to + " taken", () -> {
            last[0] = Daemons.raw(d.addr, "PARTITION MOVE " + slots + " " + to).get(0);
            return !(last[0].startsWith("ERR LIMIT ") && last[0].contains(" imported "));
        });
        String r = last[0];
        assertTrue(r.startsWith("OK PARTITION epoch=") && List.of(r.split(" ")).contains("to=" + to), r);
        return Long.parseLong(r.substring("OK PARTITION epoch=".length(), r.indexOf(' ', "OK PARTITION epoch=".length())));
    }

    static void waitEpoch(long epoch, Daemons.Proc... ds) {
        for (Daemons.Proc d : ds) {
            Daemons.eventually(SETTLE, d.name + " reads map epoch " + epoch, () -> epochOf(d.addr) >= epoch);
        }
    }

    /** STATUS name on a connection of its own to d. */
    static String status(Daemons.Proc d, String name) {
        return Daemons.raw(d.addr, "STATUS " + name).get(0);
    }

    static String kv(String line, String key) {
        for (String w : line.split(" ")) if (w.startsWith(key + "=")) return w.substring(key.length() + 1);
        return null;
    }

    /** name's lease lives on d with this token, and the other daemons send it to d's partition. */
    void heldOn(Daemons.Proc d, String name, long token) {
        heldOn(List.of(p0, p1, p2), d, name, token);
    }

    /** As {@link #heldOn(Daemons.Proc, String, long)}, of the service of the daemons all. */
    static void heldOn(List<Daemons.Proc> all, Daemons.Proc d, String name, long token) {
        String s = status(d, name);
        assertEquals("held", kv(s, "state"), s);
        assertEquals(Long.toUnsignedString(token), kv(s, "token"), s);
        for (Daemons.Proc o : all) {
            if (o == d) continue;
            String m = status(o, name);
            String[] w = m.split(" ");
            assertTrue(m.startsWith("NO MOVED " + d.name.substring("dlockd-".length()) + " ")
                    && List.of(w[3].split(",")).contains(d.addr), m);
        }
    }

    @BeforeAll
    void start() {
        ds = new Daemons();
        redis = ds.redis();
        p0 = part("p0");
        p1 = part("p1");
        p2 = part("p2");
        makeMap(p0, p1, p2);
    }

    /**
     * PARTITION INIT on q0 (of p0), then slots 5461-10922 to q1 (p1) and 10923-16383 to q2 (p2), every daemon reading
     * the last map; its epoch.
     */
    static long makeMap(Daemons.Proc q0, Daemons.Proc q1, Daemons.Proc q2) {
        String r = Daemons.raw(q0.addr, "PARTITION INIT").get(0);
        assertEquals("OK PARTITION epoch=1", r);
        Daemons.eventually(SETTLE, "every partition in p0's map with its address", () -> {
            String m = String.join("\n", map(q0.addr));
            return m.contains("part p0 addrs=" + q0.addr + " ") && m.contains("part p1 addrs=" + q1.addr + " ")
                    && m.contains("part p2 addrs=" + q2.addr + " ");
        });
        move(q0, "5461-10922", "p1");
        long e = move(q0, "10923-16383", "p2");
        waitEpoch(e, q0, q1, q2);
        return e;
    }

    @AfterAll
    void stop() {
        if (ds != null) ds.close();
    }

    @Test
    @Order(1)
    void eachNameGoesToItsPartitionAndItsLeaseStaysThere() throws Exception {
        assertEquals(5061, DlockClient.slot("bar"));
        assertEquals(9995, DlockClient.slot("qux"));
        assertEquals(12182, DlockClient.slot("foo"));
        DlockClient c = Daemons.client(p0.addr).build();
        Lease kept;
        List<Engine> legs = new ArrayList<>();
        try {
            assertTrue(c.mapEpoch() >= 3, "routed by a map: epoch " + c.mapEpoch());
            Map<String, Daemons.Proc> where = Map.of("bar", p0, "qux", p1, "foo", p2);
            for (String n : List.of("bar", "qux", "foo")) {
                Daemons.Proc d = where.get(n);
                Lease l = c.lock(n, TTL);
                heldOn(d, n, l.token());
                Status st = c.status(n);
                assertTrue(st.held(), st.toString());
                assertEquals(l.token(), st.token());
                assertEquals(c.owner(), st.owner(), "one owner on every partition");
                assertEquals(1, c.holders(n).holders().size());
                c.check(n, l.token());
                l.check();
                l.refresh(Duration.ofSeconds(20));
                String s = status(d, n);
                assertTrue(Long.parseLong(kv(s, "ttl_ms")) > 10000, "refreshed through the lease: " + s);
                assertThrows(BusyException.class, () -> c.tryLock(n, TTL), "the client's turn");
                l.unlock();
                assertEquals("free", kv(status(d, n), "state"));
                assertThrows(LeaseLostException.class, () -> c.check(n, l.token()));
            }
            // one leg per partition, each an ordinary client of its partition's daemon; the leases stay bound to it
            Map<String, DlockClient> ls = c.router().legs();
            assertEquals(Set.of("p0", "p1", "p2"), ls.keySet());
            for (DlockClient x : ls.values()) {
                legs.add(x.engine());
                assertNull(x.router());
                assertEquals(c.owner(), x.owner());
                assertEquals(c.ownerKey(), x.ownerKey());
            }
            assertNotEquals(ls.get("p1").clusterId(), ls.get("p2").clusterId(), "a cluster id per partition");
            Lease q = c.lock("qux", TTL);
            assertTrue(q.c == ls.get("p1").engine(), "qux's lease is p1's leg's");
            Lease a = c.lockAsync("foo", TTL).get(10, TimeUnit.SECONDS);
            assertTrue(a.c == ls.get("p2").engine(), "foo's lease is p2's leg's");
            heldOn(p2, "foo", a.token());
            // another client of the same service waits for the lock on its partition
            try (DlockClient o = Daemons.client(p0.addr).build()) {
                CompletableFuture<Lease> w = o.lockAsync("qux", TTL);
                Daemons.eventually(Duration.ofSeconds(5), "a waiter on p1", () -> "1".equals(kv(status(p1, "qux"), "waiters")));
                q.unlock();
                Lease ql = w.get(10, TimeUnit.SECONDS);
                heldOn(p1, "qux", ql.token());
                assertTrue(ql.token() > q.token());
                ql.unlock();
            }
            // a watch of names of several partitions and of a prefix (p0's names: the first connection's)
            try (Watch w = c.watch("qux", "foo", "ba*")) {
                assertEquals(Set.of("qux", "foo", "ba*"), new HashSet<>(w.patterns()));
                a.unlock();
                Lease b = c.lock("bar", TTL);
                Lease q2 = c.lock("qux", TTL);
                Set<String> seen = new HashSet<>();
                long end = System.nanoTime() + Duration.ofSeconds(10).toNanos();
                while (seen.size() < 3 && System.nanoTime() < end) {
                    WatchEvent ev = w.poll(Duration.ofMillis(200));
                    if (ev != null) seen.add(ev.name() + " " + ev.kind());
                }
                assertTrue(seen.containsAll(Set.of("foo RELEASED", "bar GRANTED", "qux GRANTED")), seen.toString());
                b.unlock();
                q2.unlock();
            }
            kept = c.lock("foo", TTL);
        } finally {
            c.close();
        }
        // closing the client closes every leg: their leases are lost to it (and end at the server by their TTL)
        assertEquals(LostReason.CLIENT_CLOSED, kept.lostReason());
        for (Engine e : legs) {
            assertTrue(e.quit, "leg " + e.id + " closed");
        }
        assertEquals("held", kv(status(p2, "foo"), "state"));
        Daemons.raw(p2.addr, "BREAK foo " + Long.toUnsignedString(kept.token()) + " reason=test");
    }

    @Test
    @Order(2)
    void aMultiLockUnderOneTagIsGrantedOnItsPartition() throws Exception {
        try (DlockClient c = Daemons.client(p0.addr).build()) {
            Leases ls = c.lockAll(List.of("{qux}b", "{qux}a"), TTL);
            assertEquals(List.of("{qux}a", "{qux}b"), ls.list().stream().map(Lease::name).toList());
            for (Lease l : ls) heldOn(p1, l.name(), l.token());
            ls.unlockAll();
            assertEquals("free", kv(status(p1, "{qux}a"), "state"));
            Leases t = c.tryLockAll(List.of("{foo}1", "{foo}2"), TTL);
            for (Lease l : t) heldOn(p2, l.name(), l.token());
            t.unlockAll();
            Leases f = c.lockAllAsync(List.of("{bar}x", "{bar}y"), TTL).get(10, TimeUnit.SECONDS);
            for (Lease l : f) heldOn(p0, l.name(), l.token());
            f.unlockAll();
            // names of several partitions: the server's refusal, whichever leg it went to
            DlockException x = assertThrows(DlockException.class, () -> c.lockAll(List.of("bar", "qux"), TTL));
            assertEquals("BAD_ARG", x.code(), x.toString());
            assertTrue(x.serverLine().contains("several partitions"), x.serverLine());
            x = assertThrows(DlockException.class, () -> c.tryLockAll(List.of("foo", "qux"), TTL));
            assertEquals("BAD_ARG", x.code(), x.toString());
            ExecutionException y = assertThrows(ExecutionException.class,
                    () -> c.lockAllAsync(List.of("foo", "bar"), TTL).get(10, TimeUnit.SECONDS));
            assertEquals("BAD_ARG", ((DlockException) y.getCause()).code(), y.toString());
            for (String n : List.of("bar", "qux", "foo")) assertTrue(!c.status(n).held(), n + " held by nobody");
        }
    }

    @Test
    @Order(3)
    void anUnpartitionedDaemonIsUsedAsBefore() {
        try (Daemons d = new Daemons()) {
            Daemons.Proc x = d.dlockd();
            assertEquals("OK MAP 0 0", map(x.addr).get(0));
            try (DlockClient c = Daemons.client(x.addr).build()) {
                assertEquals(0, c.mapEpoch());
                assertNull(c.router(), "no router: every call on the one connection");
                Lease l = c.lock("foo", TTL);
                assertTrue(l.c == c.engine());
                assertTrue(c.status("foo").held());
                l.unlock();
            }
        }
    }

    /** A name of p2's slots (not foo's) that no test holds. */
    static String anotherOfP2() {
        for (int i = 0;; i++) {
            String n = "moved-" + i;
            int s = Slots.of(n);
            if (s >= 10923 && s != 12182) return n;
        }
    }

    @Test
    @Order(4)
    void aMovedNameIsFollowedAfterTheMapChanged() throws Exception {
        try (DlockClient c = Daemons.client(p0.addr).build()) {
            // the client routes by the map it read at first: foo, and another of p2's names, on p2
            String other = anotherOfP2();
            long fooOnP2 = 0;
            for (String n : List.of("foo", other)) {
                Lease l = c.lock(n, TTL);
                heldOn(p2, n, l.token());
                if (n.equals("foo")) fooOnP2 = l.token();
                l.unlock();
            }
            long before = c.mapEpoch();
            assertEquals(before, epochOf(p2.addr));

            // p2 gives the other name's slot to p1: an asynchronous lock is told MOVED by p2, reads the map again
            // (from p2), and is sent to p1
            long e1 = move(p2, String.valueOf(Slots.of(other)), "p1");
            waitEpoch(e1, p0, p1, p2); // p0 too: heldOn asks it
            Lease lo = c.lockAsync(other, TTL).get(20, TimeUnit.SECONDS);
            assertTrue(c.mapEpoch() >= e1, "the map read again: epoch " + c.mapEpoch());
            heldOn(p1, other, lo.token());
            assertTrue(lo.c == c.router().legs().get("p1").engine());

            // then p1 gets a second address, and foo's slot (nothing held there) goes to p1: the map the client has is
            // older than the daemons' again
            String r = Daemons.raw(p1.addr, "PARTITION ADDRS p1 " + p1.addr + ",127.0.0.1:1").get(0);
            assertTrue(r.startsWith("OK PARTITION epoch="), r);
            assertEquals("free", kv(status(p2, "foo"), "state"));
            long e2 = move(p2, "12182", "p1");
            waitEpoch(e2, p0, p1, p2);
            assertTrue(c.mapEpoch() < e2);
            Lease l = c.lock("foo", TTL);
            assertTrue(c.mapEpoch() >= e2, "the map read again: epoch " + c.mapEpoch());
            Engine leg1 = c.router().legs().get("p1").engine();
            leg1.exec(() -> assertEquals(List.of(p1.addr, "127.0.0.1:1"), leg1.cfg.addrs.stream().map(a -> a.name).toList(),
                    "the leg of p1 has the new list"));
            heldOn(p1, "foo", l.token());
            String s = status(p1, "foo");
            assertEquals("held", kv(s, "state"), s);
            assertTrue(Long.compareUnsigned(l.token(), fooOnP2) > 0, "the receiver's tokens stay above the giver's: "
                    + Long.toUnsignedString(l.token()) + " after " + Long.toUnsignedString(fooOnP2));
            l.refresh(Duration.ofSeconds(15));
            l.unlock();
            lo.unlock();
            assertEquals("free", kv(status(p1, "foo"), "state"));
        }
        // a new client routes foo to p1 at once
        try (DlockClient c = Daemons.client(p0.addr).build()) {
            Lease l = c.lock("foo", TTL);
            heldOn(p1, "foo", l.token());
            assertEquals(Set.of("p1"), c.router().legs().keySet());
            l.unlock();
        }
    }

    @Test
    @Order(5)
    void legsAreMadeOnFirstUseAndNamelessCallsUseTheFirstConnection() {
        try (DlockClient c = Daemons.client(p0.addr).build()) {
            assertTrue(c.router().legs().isEmpty(), "no leg before a name is used");
            c.ping();
            assertTrue(c.router().legs().isEmpty(), "ping goes to the first connection");
            assertThrows(IllegalArgumentException.class, () -> c.lock("a b", TTL), "checked before routing");
            assertTrue(c.router().legs().isEmpty());
            assertTrue(!c.status("qux").held());
            assertEquals(Set.of("p1"), c.router().legs().keySet());
        }
    }

    /** A daemon whose map sends every name to itself, and that answers every LOCK with MOVED to itself. */
    @Test
    @Order(6)
    void aCallMovedOnAndOnFailsAfterThreeRedirects() throws Exception {
        java.util.concurrent.atomic.AtomicReference<String> at = new java.util.concurrent.atomic.AtomicReference<>();
        try (FakeServerTest.Fake f = new FakeServerTest.Fake((n, l) -> {
            String tag = RobustnessTest.tagOf(l);
            if (l.startsWith("MAP")) {
                return "OK MAP 2 2 id=" + tag + "\r\npart p0 addrs=" + at.get() + " floor=0\r\nslots p0 0-16383";
            }
            if (l.startsWith("LOCK ") || l.startsWith("TRYLOCK ")) return "NO MOVED p0 " + at.get() + " 2 id=" + tag;
            return null;
        })) {
            at.set(f.addr());
            try (DlockClient c = Daemons.client(f.addr()).build()) {
                assertEquals(2, c.mapEpoch());
                MovedException x = assertThrows(MovedException.class, () -> c.lock("x", TTL));
                assertEquals("MOVED", x.code());
                assertEquals(DlockException.Kind.MOVED, x.kind());
                assertEquals("p0", x.partition());
                assertEquals(f.addr(), x.addresses());
                assertEquals(2, x.mapEpoch());
                assertEquals(4, f.seen.stream().filter(s -> s.contains(" LOCK x ")).count(), f.seen.toString());
                ExecutionException y = assertThrows(ExecutionException.class, () -> c.lockAsync("y", TTL).get(10, TimeUnit.SECONDS));
                assertTrue(y.getCause() instanceof MovedException, y.toString());
                assertEquals(4, f.seen.stream().filter(s -> s.contains(" LOCK y ")).count(), f.seen.toString());
            }
        }
    }
    /**
     * A fake daemon whose first MAP says no map (a partitioned daemon that has not read its map yet) and the next ones
     * a map of every slot to itself, and that answers every LOCK and STATUS with MOVED to itself.
     */
    static FakeServerTest.Fake noMapYet(java.util.concurrent.atomic.AtomicReference<String> at, int mapsOfEpoch0,
            java.util.concurrent.atomic.AtomicInteger maps) throws IOException {
        return new FakeServerTest.Fake((n, l) -> {
            String tag = RobustnessTest.tagOf(l);
            if (l.startsWith("MAP")) {
                if (maps.incrementAndGet() <= mapsOfEpoch0) return "OK MAP 0 0 id=" + tag;
                return "OK MAP 2 2 id=" + tag + "\r\npart p0 addrs=" + at.get() + " floor=0\r\nslots p0 0-16383";
            }
            if (l.startsWith("LOCK ") || l.startsWith("TRYLOCK ") || l.startsWith("STATUS ")) {
                return "NO MOVED p0 " + at.get() + " 2 id=" + tag;
            }
            return null;
        });
    }

    @Test
    @Order(7)
    void aMovedMakesAClientThatFoundNoMapReadItAgain() throws Exception {
        java.util.concurrent.atomic.AtomicReference<String> at = new java.util.concurrent.atomic.AtomicReference<>();
        java.util.concurrent.atomic.AtomicInteger maps = new java.util.concurrent.atomic.AtomicInteger();
        // MAP 0 at build(), then MOVED: MAP read again (a map now), the client routes, the call redirected within the
        // same bound (the first MOVED counts): 4 LOCKs in all
        try (FakeServerTest.Fake f = noMapYet(at, 1, maps)) {
            at.set(f.addr());
            try (DlockClient c = Daemons.client(f.addr()).build()) {
                assertNull(c.router());
                assertEquals(1, maps.get());
                MovedException x = assertThrows(MovedException.class, () -> c.lock("x", TTL));
                assertTrue(x.getMessage().contains("4 times"), x.getMessage());
                assertNotNull(c.router(), "a router now");
                assertEquals(2, c.mapEpoch());
                assertEquals(2, maps.get());
                assertEquals(4, f.seen.stream().filter(s -> s.contains(" LOCK x ")).count(), f.seen.toString());
            }
        }
        // the same of an asynchronous lock
        maps.set(0);
        try (FakeServerTest.Fake f = noMapYet(at, 1, maps)) {
            at.set(f.addr());
            try (DlockClient c = Daemons.client(f.addr()).build()) {
                assertNull(c.router());
                ExecutionException y = assertThrows(ExecutionException.class,
                        () -> c.lockAsync("y", TTL).get(20, TimeUnit.SECONDS));
                assertTrue(y.getCause() instanceof MovedException && y.getCause().getMessage().contains("4 times"),
                        y.toString());
                assertNotNull(c.router(), "a router now");
                assertEquals(4, f.seen.stream().filter(s -> s.contains(" LOCK y ")).count(), f.seen.toString());
            }
        }
        // a daemon that still says no map: the MOVED is the caller's, as the server said it; the client stays as it was
        maps.set(0);
        try (FakeServerTest.Fake f = noMapYet(at, Integer.MAX_VALUE, maps)) {
            at.set(f.addr());
            try (DlockClient c = Daemons.client(f.addr()).build()) {
                MovedException x = assertThrows(MovedException.class, () -> c.status("z"));
                assertEquals("p0", x.partition());
                assertEquals(2, x.mapEpoch());
                assertNull(c.router());
                assertEquals(2, maps.get(), "MAP asked again once");
                assertEquals(1, f.seen.stream().filter(s -> s.contains(" STATUS z")).count(), f.seen.toString());
                ExecutionException y = assertThrows(ExecutionException.class,
                        () -> c.lockAsync("y", TTL).get(20, TimeUnit.SECONDS));
                assertTrue(y.getCause() instanceof MovedException, y.toString());
                assertNull(c.router());
            }
        }
    }

    /**
     * Clients built while the partitioned daemons have no map yet (MAP says 0 0, as an unpartitioned daemon's): once
     * the map is made and the slots moved, a call about another partition's name is told MOVED, the client reads MAP
     * again, routes from then on, and the lease is on the right daemon.
     */
    @Test
    @Order(8)
    void aClientBuiltBeforeTheMapIsMadeRoutesAfterAMoved() throws Exception {
        try (Daemons d = new Daemons()) {
            Daemons.Proc r = d.redis();
            Daemons.Proc q0 = part(d, r, "p0"), q1 = part(d, r, "p1"), q2 = part(d, r, "p2");
            List<Daemons.Proc> all = List.of(q0, q1, q2);
            assertEquals("OK MAP 0 0", map(q0.addr).get(0));
            try (DlockClient c = Daemons.client(q0.addr).build();
                    DlockClient a = Daemons.client(q0.addr).build();
                    DlockClient w = Daemons.client(q0.addr).build()) {
                assertNull(c.router());
                assertEquals(0, c.mapEpoch());
                long e = makeMap(q0, q1, q2);
                assertNull(c.router(), "nothing polls");
                // qux is p1's: p0 says MOVED
                Lease l = c.lock("qux", TTL);
                assertNotNull(c.router(), "a router now");
                assertTrue(c.mapEpoch() >= e, "routed by the map of epoch " + c.mapEpoch());
                heldOn(all, q1, "qux", l.token());
                assertTrue(l.c == c.router().legs().get("p1").engine(), "qux's lease is p1's leg's");
                assertEquals(l.token(), c.status("qux").token());
                l.refresh(Duration.ofSeconds(20));
                assertTrue(Long.parseLong(kv(status(q1, "qux"), "ttl_ms")) > 10000, "refreshed on p1");
                l.unlock();
                assertEquals("free", kv(status(q1, "qux"), "state"));
                // every partition's names, the first connection's own too
                for (Map.Entry<String, Daemons.Proc> x : Map.of("bar", q0, "foo", q2).entrySet()) {
                    Lease y = c.lock(x.getKey(), TTL);
                    heldOn(all, x.getValue(), x.getKey(), y.token());
                    y.unlock();
                }
                assertEquals(Set.of("p0", "p1", "p2"), c.router().legs().keySet());
                // an asynchronous lock of another such client: the same
                assertNull(a.router());
                Lease la = a.lockAsync("foo", TTL).get(20, TimeUnit.SECONDS);
                assertNotNull(a.router(), "a router now");
                heldOn(all, q2, "foo", la.token());
                la.unlock();
                // a watch of a name
                assertNull(w.router());
                try (Watch wt = w.watch("qux")) {
                    assertNotNull(w.router(), "a router now");
                    Lease q = c.lock("qux", TTL);
                    WatchEvent ev = wt.poll(Duration.ofSeconds(10));
                    assertNotNull(ev, "an event of qux from p1");
                    assertEquals("qux", ev.name());
                    assertEquals(WatchEvent.Kind.GRANTED, ev.kind());
                    q.unlock();
                }
            }
        }
    }

    /** What a future came to, so far (for a failure's message). */
    static String outcome(CompletableFuture<?> f) {
        if (!f.isDone()) return "waiting";
        try {
            return "done: " + f.getNow(null);
        } catch (RuntimeException x) {
            return "failed: " + (x.getCause() != null ? x.getCause() : x);
        }
    }

    /** A name of p0's slots that no other test uses: the n-th of prefix's, each of a slot of its own. */
    static String ofP0(String prefix, int n) {
        Set<Integer> seen = new HashSet<>(Set.of(Slots.of("bar")));
        for (int i = 0;; i++) {
            String x = prefix + i;
            int s = Slots.of(x);
            if (s > 5460 || !seen.add(s)) continue;
            if (n-- == 0) return x;
        }
    }

    /**
     * A lease renewed in the background keeps its lock when its slot moves to another partition: the giver answers
     * its renewal MOVED, the client re-homes it onto p1's leg, and it lives on there with the same token, well past its
     * TTL; the holder refreshes, checks and unlocks it there, and the next holder gets a larger token.
     */
    @Test
    @Order(9)
    void aLeaseSurvivesAMoveOfItsSlot() throws Exception {
        String n = ofP0("keep-", 0);
        Duration ttl = Duration.ofSeconds(4);
        try (DlockClient c = Daemons.client(p0.addr).build(); DlockClient o = Daemons.client(p0.addr).build()) {
            Lease l = c.lock(n, LockOptions.ttl(ttl));
            heldOn(p0, n, l.token());
            long e = move(p0, String.valueOf(Slots.of(n)), "p1");
            waitEpoch(e, p0, p1, p2);
            Daemons.sleep(2 * ttl.toMillis());
            assertTrue(l.isValid(), "held across the move: " + l + " " + l.lostCause());
            assertEquals(LostReason.NOT_LOST, l.lostReason());
            heldOn(p1, n, l.token());
            assertTrue(l.c == c.router().legs().get("p1").engine(), "re-homed onto p1's leg");
            assertThrows(BusyException.class, () -> o.tryLock(n, TTL), "held for another owner");
            l.refresh(Duration.ofSeconds(5));
            l.check();
            c.check(n, l.token());
            assertThrows(BusyException.class, () -> o.tryLock(n, TTL), "still held");
            l.unlock();
            assertEquals("free", kv(status(p1, n), "state"));
            Lease x = o.tryLock(n, TTL);
            assertTrue(Long.compareUnsigned(x.token(), l.token()) > 0,
                    Long.toUnsignedString(x.token()) + " after " + Long.toUnsignedString(l.token()));
            heldOn(p1, n, x.token());
            x.unlock();
        }
    }

    /**
     * The waiters of a name whose slot moves follow it: the giver answers their waiting LOCK MOVED, each is sent to
     * p1 again (a blocking lock and an asynchronous one) and keeps its place there; the holder unlocks through its
     * lease (told MOVED by the giver, re-homed), and the waiters are granted in order, each a larger token.
     */
    @Test
    @Order(10)
    void aWaiterFollowsItsName() throws Exception {
        String n = ofP0("wait-", 0);
        LockOptions wait = LockOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(60));
        try (DlockClient a = Daemons.client(p0.addr).build(); DlockClient b = Daemons.client(p0.addr).build();
                DlockClient w = Daemons.client(p0.addr).build()) {
            Lease la = a.lock(n, TTL);
            heldOn(p0, n, la.token());
            CompletableFuture<Lease> fb = CompletableFuture.supplyAsync(() -> b.lock(n, wait));
            Daemons.eventually(SETTLE, "b waits on p0", () -> "1".equals(kv(status(p0, n), "waiters")));
            CompletableFuture<Lease> fw = w.lockAsync(n, wait);
            Daemons.eventually(SETTLE, "w waits on p0", () -> "2".equals(kv(status(p0, n), "waiters")));
            long e = move(p0, String.valueOf(Slots.of(n)), "p1");
            waitEpoch(e, p0, p1, p2);
            assertTrue(!fb.isDone() && !fw.isDone(), "still waiting: " + outcome(fb) + ", " + outcome(fw));
            la.unlock();
            Lease lb = fb.get(30, TimeUnit.SECONDS);
            assertTrue(Long.compareUnsigned(lb.token(), la.token()) > 0,
                    Long.toUnsignedString(lb.token()) + " after " + Long.toUnsignedString(la.token()));
            heldOn(p1, n, lb.token());
            assertTrue(lb.c == b.router().legs().get("p1").engine(), "granted by p1");
            assertTrue(!fw.isDone(), "w waits behind b");
            lb.unlock();
            Lease lw = fw.get(30, TimeUnit.SECONDS);
            assertTrue(Long.compareUnsigned(lw.token(), lb.token()) > 0,
                    Long.toUnsignedString(lw.token()) + " after " + Long.toUnsignedString(lb.token()));
            heldOn(p1, n, lw.token());
            lw.unlock();
        }
    }

    /**
     * A multi-lock waiting on a name whose slot moves is told so ({@code * FAILED <first> MOVED <name>}, nothing held),
     * and is sent again, to p1, where it is granted every name once the holder (re-homed) unlocks.
     */
    @Test
    @Order(11)
    void aWaitingMultiLockFollowsItsNames() throws Exception {
        String tag = ofP0("multi-", 0);
        String na = "{" + tag + "}a", nb = "{" + tag + "}b";
        try (DlockClient a = Daemons.client(p0.addr).build(); DlockClient m = Daemons.client(p0.addr).build()) {
            Lease lb = a.lock(nb, TTL);
            heldOn(p0, nb, lb.token());
            CompletableFuture<Leases> fm = m.lockAllAsync(List.of(na, nb),
                    LockOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(60)));
            Daemons.eventually(SETTLE, "the multi-lock waits on p0", () -> "1".equals(kv(status(p0, nb), "waiters")));
            long e = move(p0, String.valueOf(Slots.of(na)), "p1");
            waitEpoch(e, p0, p1, p2);
            assertTrue(!fm.isDone(), "still waiting: " + outcome(fm));
            lb.unlock();
            Leases ls = fm.get(30, TimeUnit.SECONDS);
            for (Lease l : ls) heldOn(p1, l.name(), l.token());
            assertTrue(Long.compareUnsigned(ls.get(nb).token(), lb.token()) > 0,
                    Long.toUnsignedString(ls.get(nb).token()) + " after " + Long.toUnsignedString(lb.token()));
            ls.unlockAll();
            assertEquals("free", kv(status(p1, nb), "state"));
        }
    }
}
