package dlockd;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.parallel.Isolated;

/**
 * The Java client's runner of the conformance scenarios (tests/conformance/scenarios.txt, which says the language);
 * libdlock (tests/test_conformance.c), the Python client (tests/python/test_conformance.py) and the Go client
 * (client/go/conformance_test.go) run the same file. One dynamic test per scenario, each on a daemon of its own; a
 * step whose outcome differs fails with the scenario's name, its line and what was seen.
 *
 * <p>The scenarios all start at once when the factory is called (each on a thread of its own); each dynamic test
 * waits for its scenario's outcome. Only the client's public API is used.
 *
 * <p>"lost L within ms": the listener must run before the lease's local deadline. The public API shows that
 * deadline only as {@link Lease#remaining()} while the lease is held (zero once lost), so a sampler reads it every
 * millisecond: deadline = (the clock read just BEFORE remaining()) + remaining -- never later than the client's own
 * deadline, so the check is never weaker than comparing with the client's field. The last sample before the loss is
 * taken (a renewal confirmed after it only moves the true deadline later).
 *
 * <p>"contended L n within ms": the client's {@link DlockClient.Builder#onContended} listener said n for L's lease,
 * and {@link Lease#waiters()} says n. What the listener said is kept by lease object, not by the scenario's name: a
 * waiter's grant is told of the requests behind it before its lease is handed out (and bound to L at its join).
 *
 * <p>With DL_CONFORMANCE_PARTS=1 (as tests/test_conformance.c's test_conformance.parts) every scenario runs on a
 * partitioned service instead: a redis-server and three daemons of partitions p0, p1 and p2, the map giving p0 the
 * slots below 5461, p1 those below 10923, p2 the rest. The clients know p0's daemon only, and every name of a scenario
 * is put under one tag "{c&lt;k&gt;}" whose slot is p1's (a scenario of even index in the file) or p2's (odd): each
 * of its calls goes through the map and NO MOVED to the partition that serves it, and a multi-lock's names share it.
 * "daemon none" starts the same service (partitions need Redis); "daemon kill9", "restart", "pause" and "resume" act
 * on every daemon. The tests are named "&lt;scenario&gt; [parts]" then.
 *
 * <p>{@link Isolated}: no other test class runs meanwhile (javatest runs four at once). A "lost" step has the lease's
 * guard as its margin, 40 ms for a lease of 400 ms, which two CPUs busy with other classes' daemons can eat.
 */
@Isolated
class ConformanceTest {
    static final Duration STATUS_POLL = Duration.ofSeconds(2); // a status step is polled this long
    static final long STEP_MAX_MS = 30_000; // no step waits longer
    static final long SCENARIO_MAX_MS = 120_000;
    /** DL_CONFORMANCE_PARTS=1: each scenario on a partitioned service (see above). */
    static final boolean PARTS = "1".equals(System.getenv("DL_CONFORMANCE_PARTS"));
    // A partitioned scenario starts four processes: three at a time (as test_conformance.parts) on two CPUs.
    static final int PARALLEL = PARTS ? 3 : 6;
    static final int PART_COUNT = 3; // the partitioned service's partitions
    static final long PARTS_SETTLE_MS = 20_000; // a partition shows in the map, a daemon serves from the new map

    record Line(int no, String text) {}

    record Scenario(String name, List<Line> lines) {}

    /** The scenarios: DL_CONFORMANCE, else found from the top of the tree or from client/java. Never skipped. */
    static Path scenarioFile() {
        String env = System.getenv("DL_CONFORMANCE");
        if (env != null && !env.isEmpty()) {
            Path p = Path.of(env);
            if (!Files.isReadable(p)) fail("DL_CONFORMANCE=" + env + ": no such file");
            return p;
        }
        for (String c : new String[] {"tests/conformance/scenarios.txt", "../../tests/conformance/scenarios.txt"}) {
            Path p = Path.of(c);
            if (Files.isReadable(p)) return p;
        }
        fail("no tests/conformance/scenarios.txt from " + Path.of("").toAbsolutePath() + " (set DL_CONFORMANCE)");
        return null;
    }

    static List<Scenario> readScenarios() {
        Path f = scenarioFile();
        List<String> text;
        try {
            text = Files.readAllLines(f, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new AssertionError("the scenarios: " + e, e);
        }
        List<Scenario> out = new ArrayList<>();
        for (int i = 0; i < text.size(); i++) {
            String t = text.get(i).strip();
            if (t.isEmpty() || t.startsWith("#")) continue;
            if (t.startsWith("scenario ")) out.add(new Scenario(t.split("\\s+")[1], new ArrayList<>()));
            if (out.isEmpty()) fail(f + ", line " + (i + 1) + ": a step before the first scenario");
            out.get(out.size() - 1).lines().add(new Line(i + 1, t));
        }
        if (out.isEmpty()) fail("no scenario in " + f);
        return out;
    }

    @TestFactory
    Stream<DynamicTest> conformance() {
        List<Scenario> all = readScenarios();
        // A few at a time: the "lost ... before its deadline" steps have tens of ms of margin, which a machine of two
        // CPUs starting 18 daemons and 40 clients at once can eat.
        ExecutorService pool = Executors.newFixedThreadPool(Math.min(all.size(), PARALLEL), r -> {
            Thread t = new Thread(r, "conformance");
            t.setDaemon(true);
            return t;
        });
        List<Future<?>> runs = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            Scenario sc = all.get(i);
            int index = i; // by the scenario's index: its names on p1 or p2 with DL_CONFORMANCE_PARTS
            runs.add(pool.submit(() -> {
                try (Run r = new Run(sc, index)) {
                    r.run();
                }
                return null;
            }));
        }
        pool.shutdown();
        List<DynamicTest> tests = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            Future<?> f = runs.get(i);
            String name = all.get(i).name() + (PARTS ? " [parts]" : "");
            tests.add(DynamicTest.dynamicTest(name, () -> {
                try {
                    f.get(SCENARIO_MAX_MS, TimeUnit.MILLISECONDS);
                } catch (ExecutionException e) {
                    throw e.getCause();
                } catch (TimeoutException e) {
                    f.cancel(true);
                    fail(name + ": not done within " + SCENARIO_MAX_MS + " ms");
                }
            }));
        }
        return tests.stream();
    }

    // ---- one scenario ------------------------------------------------------------------

    /** A lease as the runner watches it: the loss its listener saw, and the local deadline sampled before. */
    static final class Watched {
        final Lease lease;
        long deadlineNs; // under the Watched's monitor
        boolean sampled;
        final CompletableFuture<Loss> loss = new CompletableFuture<>();

        Watched(Lease lease) {
            this.lease = lease;
        }
    }

    /** When the listener ran, the last local deadline sampled before, the loss. */
    record Loss(long atNs, long deadlineNs, boolean sampled, LeaseLostException e) {}

    record SClient(DlockClient c, boolean renew) {}

    static final class Run implements AutoCloseable {
        final Scenario sc;
        final int index; // in the file
        int no;
        final Daemons ds = new Daemons();
        Daemons.Proc redis, d; // d: the clients' daemon (p0's with DL_CONFORMANCE_PARTS)
        final List<Daemons.Proc> service = new ArrayList<>(); // every daemon of the scenario: d, or p0's, p1's, p2's
        String tag = ""; // "{c<k>}" with DL_CONFORMANCE_PARTS: put before each name of the scenario
        final Map<String, SClient> clients = new HashMap<>();
        final Map<String, Lease> leases = new HashMap<>();
        final Map<String, CompletableFuture<?>> jobs = new HashMap<>(); // of a Lease (lock) or Leases (lockall)
        final Map<Lease, Watched> watched = new ConcurrentHashMap<>();
        final Map<Lease, Integer> told = new ConcurrentHashMap<>(); // what onContended said last, by lease
        volatile boolean stop;
        final Thread sampler;

        Run(Scenario sc, int index) {
            this.sc = sc;
            this.index = index;
            sampler = new Thread(this::sample, "conformance-sampler-" + sc.name());
            sampler.setDaemon(true);
            sampler.start();
        }

        void run() {
            for (Line l : sc.lines()) {
                no = l.no();
                line(l.text());
            }
        }

        void fail(String msg) {
            throw new AssertionError(sc.name() + ", line " + no + ": " + msg);
        }

        /** Reads each held lease's remaining() every millisecond: its local deadline, from below. */
        void sample() {
            while (!stop) {
                for (Watched w : watched.values()) sampleNow(w);
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }

        /** One reading of the local deadline, if the lease has time left. */
        static void sampleNow(Watched w) {
            synchronized (w) { // the sampler's and a step's readings: the later one is kept
                if (w.loss.isDone()) return;
                long t0 = System.nanoTime(); // before remaining() reads the client's clock
                Duration r = w.lease.remaining();
                if (!r.isZero()) {
                    w.deadlineNs = t0 + r.toNanos();
                    w.sampled = true;
                }
            }
        }

        static Map<String, String> opts(String[] words, int from) {
            Map<String, String> m = new HashMap<>();
            for (int i = from; i < words.length; i++) {
                int eq = words[i].indexOf('=');
                if (eq > 0) m.put(words[i].substring(0, eq), words[i].substring(eq + 1));
            }
            return m;
        }

        static Duration ms(String s) {
            return Duration.ofMillis(Long.parseLong(s));
        }

        // ---- steps ---------------------------------------------------------------

        /** A private redis-server, appendfsync always. */
        Daemons.Proc startRedis() {
            return ds.startListening("redis", "Ready to accept connections", port -> {
                Path dir = ds.dir.resolve("redis-" + port);
                try {
                    Files.createDirectories(dir);
                } catch (IOException e) {
                    throw new IllegalStateException(e);
                }
                return List.of("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction", "--dir",
                        dir.toString());
            });
        }

        /** A daemon with these arguments, listening; one of the scenario's service. */
        Daemons.Proc startDaemon(String name, List<String> args) {
            Daemons.Proc p = ds.startListening(name, " ready (", port -> {
                List<String> a = new ArrayList<>(List.of(Daemons.bin(), "--port", String.valueOf(port), "-l", "info"));
                a.addAll(args);
                return a;
            });
            service.add(p);
            return p;
        }

        /** The first reply line to a request on a connection of its own to p. */
        String ask(Daemons.Proc p, String request) {
            try {
                return Daemons.raw(p.addr, request).get(0);
            } catch (RuntimeException e) {
                fail(p.name + ": " + request + ": " + e);
                return null;
            }
        }

        /**
         * The partitioned service (DL_CONFORMANCE_PARTS), as test_conformance.c's parts_start(): Redis, the daemons of
         * p0, p1 and p2, the map made on p0, the scenario's tag chosen on p1 or p2, and every daemon serving from the
         * new map (the tag's partition answers STATUS, the others NO MOVED).
         */
        void partsStart() {
            redis = startRedis();
            String url = "redis://127.0.0.1:" + redis.port + "/0";
            for (int i = 0; i < PART_COUNT; i++) {
                Path conf = ds.dir.resolve("p" + i + ".conf");
                try {
                    Files.writeString(conf, "[persistence]\nredis_prefix = c:\n[partition]\nid = p" + i + "\n");
                } catch (IOException e) {
                    throw new IllegalStateException(e);
                }
                startDaemon("dlockd-p" + i, List.of("-c", conf.toString(), "--persist", "redis", "--redis", url));
            }
            d = service.get(0);
            String r = ask(d, "PARTITION INIT");
            if (!r.equals("OK PARTITION epoch=1")) fail("PARTITION INIT: " + r);
            for (int i = 1; i < PART_COUNT; i++) {
                String part = "part p" + i + " "; // its daemon puts it in the map within a second
                long end = System.nanoTime() + PARTS_SETTLE_MS * 1_000_000;
                List<String> m;
                while (!(m = PartitionTest.map(d.addr)).stream().anyMatch(l -> l.startsWith(part))) {
                    if (System.nanoTime() > end) fail("p" + i + " not in p0's map in " + PARTS_SETTLE_MS + " ms: " + m);
                    Daemons.sleep(20);
                }
                String slots = i == 1 ? "5461-10922" : "10923-16383";
                r = ask(d, "PARTITION MOVE " + slots + " p" + i);
                if (!r.startsWith("OK PARTITION")) fail("PARTITION MOVE " + slots + " p" + i + ": " + r);
            }
            int target = index % 2 == 0 ? 1 : 2, lo = target == 1 ? 5461 : 10923, hi = target == 1 ? 10922 : 16383;
            for (int k = 0;; k++) {
                int slot = DlockClient.slot("c" + k); // the slot of "{c<k>}..." is its tag's
                if (slot >= lo && slot <= hi) {
                    tag = "{c" + k + "}";
                    break;
                }
            }
            for (int i = 0; i < PART_COUNT; i++) { // each daemon reads the map every second
                Daemons.Proc p = service.get(i);
                String want = i == target ? "OK STATUS" : "NO MOVED";
                long end = System.nanoTime() + PARTS_SETTLE_MS * 1_000_000;
                while (!(r = ask(p, "STATUS " + tag + "probe")).startsWith(want)) {
                    if (System.nanoTime() > end) fail("p" + i + ": STATUS " + tag + "probe: " + r + ", not " + want);
                    Daemons.sleep(20);
                }
            }
        }

        void daemon(String what) {
            switch (what) {
                case "none":
                case "redis":
                    if (PARTS) {
                        partsStart(); // partitions need Redis
                    } else if (what.equals("redis")) {
                        redis = startRedis();
                        String url = "redis://127.0.0.1:" + redis.port + "/0";
                        d = startDaemon("dlockd", List.of("--persist", "redis", "--redis", url));
                    } else {
                        d = startDaemon("dlockd", List.of("--persist", "none"));
                    }
                    break;
                case "kill9":
                    for (Daemons.Proc p : service) p.kill();
                    break;
                case "restart":
                    for (Daemons.Proc p : service) p.kill();
                    for (Daemons.Proc p : service) p.restart();
                    break;
                case "pause":
                    for (Daemons.Proc p : service) p.signal("STOP");
                    break;
                case "resume":
                    for (Daemons.Proc p : service) p.signal("CONT");
                    break;
                default:
                    fail("unknown daemon step " + what);
            }
        }

        void client(String[] words) {
            Map<String, String> o = opts(words, 2);
            DlockClient.Builder b = DlockClient.builder().servers(d.addr).connectTimeout(Duration.ofSeconds(10))
                    .serverTimeout(Duration.ofSeconds(10)).onContended(told::put);
            if (o.containsKey("owner")) b.owner(o.get("owner"));
            if (o.containsKey("key")) b.ownerKey(o.get("key"));
            DlockClient c;
            try {
                c = b.build();
            } catch (DeniedException e) {
                if ("denied".equals(o.get("expect"))) return;
                fail("connect: " + e);
                return;
            } catch (DlockException e) {
                fail("connect: " + e + (o.containsKey("expect") ? ", expected " + o.get("expect") : ""));
                return;
            }
            if ("denied".equals(o.get("expect"))) {
                c.close();
                fail("connect: accepted, expected denied");
            }
            clients.put(words[1], new SClient(c, !"0".equals(o.get("renew"))));
        }

        LockOptions lockOpts(SClient sc, String[] words, int from) {
            Map<String, String> o = opts(words, from);
            LockOptions lo = LockOptions.defaults();
            if (o.containsKey("ttl")) lo = lo.withTtl(ms(o.get("ttl")));
            String w = o.get("wait");
            lo = w == null || w.equals("inf") ? lo.waitForever() : lo.waitFor(ms(w));
            if ("shared".equals(o.get("mode"))) lo = lo.shared();
            if (o.containsKey("limit")) lo = lo.limit(Integer.parseInt(o.get("limit")));
            if ("waiters".equals(o.get("notify"))) lo = lo.notifyWaiters();
            if (o.containsKey("value")) lo = lo.value(o.get("value"));
            if (!sc.renew()) lo = lo.noRenew();
            return lo;
        }

        static String lockWord(Throwable e) {
            if (e == null) return "granted";
            if (e instanceof DeadlockException) return "cycle";
            if (e instanceof HeldByOwnerException) return "heldbyowner";
            if (e instanceof BusyException) return "busy";
            if (e instanceof LockTimeoutException) return "timeout";
            if (e instanceof LimitMismatchException) return "mismatch";
            if (e instanceof UpgradeDeadlockException) return "deadlock";
            if (e instanceof DeniedException) return "denied";
            if (e instanceof UnavailableException) return "unavailable";
            return e.toString();
        }

        /** Notes a lease and listens for its loss. */
        void granted(String v, Lease l) {
            leases.put(v, l);
            Watched w = new Watched(l);
            sampleNow(w); // at once: the next step may end the lease before the sampler runs
            watched.put(l, w);
            l.onLost(e -> {
                long at = System.nanoTime();
                synchronized (w) {
                    w.loss.complete(new Loss(at, w.deadlineNs, w.sampled, e));
                }
            });
        }

        /** The outcome of a lock (a Lease) or a lockall (Leases: "all L1 L2 ...", bound in byte order of the names). */
        void lockOutcome(Object res, Throwable err, String[] want) {
            String got = res instanceof Leases ? "all" : lockWord(err);
            if (want.length == 0 || !got.equals(want[0])) {
                if (res instanceof Lease) ((Lease) res).close();
                if (res instanceof Leases) ((Leases) res).close();
                fail("lock: " + got + (err != null ? " (" + err + ")" : "") + ", expected " + String.join(" ", want));
            }
            if (res instanceof Lease) {
                if (want.length < 2) fail("lock: granted, and no lease variable to name it");
                granted(want[1], (Lease) res);
            }
            if (res instanceof Leases) {
                List<Lease> ls = ((Leases) res).list();
                if (want.length != ls.size() + 1) {
                    fail("lockall: " + ls.size() + " leases " + ls + ", expected " + String.join(" ", want));
                }
                for (int i = 0; i < ls.size(); i++) granted(want[i + 1], ls.get(i));
            }
            if (err instanceof DeadlockException) {
                int n = ((DeadlockException) err).owners();
                if (want.length < 2 || !String.valueOf(n).equals(want[1])) {
                    fail("cycle: " + n + " owners (" + err.getMessage() + "), expected " + String.join(" ", want));
                }
            }
        }

        Lease lease(String v) {
            Lease l = leases.get(v);
            if (l == null) fail("no lease " + v);
            return l;
        }

        void expect(String what, String got, String[] want) {
            if (want.length == 0 || !got.equals(want[0])) fail(what + ": " + got + ", expected " + String.join(" ", want));
        }

        void verb(SClient s, String[] words, String[] want) {
            DlockClient c = s.c();
            switch (words[1]) {
                case "lock": {
                    Lease l = null;
                    Throwable err = null;
                    try {
                        l = c.lock(words[2], lockOpts(s, words, 3));
                    } catch (DlockException e) {
                        err = e;
                    }
                    lockOutcome(l, err, want);
                    break;
                }
                case "lockall": { // <c> lockall <name>,<name>,... [ttl=] [wait=]
                    Leases ls = null;
                    Throwable err = null;
                    try {
                        ls = c.lockAll(List.of(words[2].split(",")), lockOpts(s, words, 3));
                    } catch (DlockException e) {
                        err = e;
                    }
                    lockOutcome(ls, err, want);
                    break;
                }
                case "spawn": // <c> spawn <job> lock|lockall <name>[,<name>...] ...
                    if (words.length < 5 || !(words[3].equals("lock") || words[3].equals("lockall"))) fail("spawn: only lock and lockall");
                    if (words[3].equals("lock")) jobs.put(words[2], c.lockAsync(words[4], lockOpts(s, words, 5)));
                    else jobs.put(words[2], c.lockAllAsync(List.of(words[4].split(",")), lockOpts(s, words, 5)));
                    break;
                case "release": {
                    String got = "ok";
                    try {
                        lease(words[2]).unlock();
                    } catch (NotHolderException e) {
                        got = "notholder";
                    } catch (DlockException e) {
                        got = e.toString();
                    }
                    expect("release", got, want);
                    break;
                }
                case "refresh": {
                    String ttl = opts(words, 3).get("ttl");
                    String got = "ok";
                    try {
                        lease(words[2]).refresh(ttl == null ? null : ms(ttl));
                        Watched w = watched.get(lease(words[2]));
                        if (w != null) sampleNow(w); // the deadline it set, at once
                    } catch (LeaseLostException e) {
                        got = "lost";
                    } catch (DlockException e) {
                        got = e.toString();
                    }
                    expect("refresh", got, want);
                    break;
                }
                case "proclaim": { // <c> proclaim <L> <word>
                    if (words.length < 4) fail("proclaim: <L> <word>");
                    String got = "ok";
                    try {
                        lease(words[2]).proclaim(words[3]);
                        Watched w = watched.get(lease(words[2]));
                        if (w != null) sampleNow(w); // the deadline its refresh set, at once
                    } catch (LeaseLostException e) {
                        got = "lost";
                    } catch (DlockException e) {
                        got = e.toString();
                    }
                    expect("proclaim", got, want);
                    break;
                }
                case "check":
                case "break": {
                    long tok = lease(words[3]).token();
                    String got = words[1].equals("check") ? "valid" : "ok";
                    try {
                        if (words[1].equals("check")) c.check(words[2], tok);
                        else c.breakLease(words[2], tok, "conformance");
                    } catch (LeaseLostException e) {
                        got = "stale";
                    } catch (DlockException e) {
                        got = e.toString();
                    }
                    expect(words[1], got, want);
                    break;
                }
                case "status": {
                    long end = System.nanoTime() + STATUS_POLL.toNanos();
                    while (true) {
                        Status st;
                        try {
                            st = c.status(words[2]);
                        } catch (DlockException e) {
                            fail("status: " + e);
                            return;
                        }
                        if (statusMatches(st, want)) break;
                        if (System.nanoTime() > end) fail("status: " + st + ", expected " + String.join(" ", want));
                        Daemons.sleep(10);
                    }
                    break;
                }
                default:
                    fail("unknown verb " + words[1]);
            }
        }

        boolean statusMatches(Status st, String[] want) {
            if (want.length == 0 || !want[0].equals(st.held() ? "held" : "free")) return false;
            for (int i = 1; i < want.length; i++) {
                String w = want[i];
                int eq = w.indexOf('=');
                if (eq < 0) {
                    if (st.token() != lease(w).token()) return false;
                    continue;
                }
                String k = w.substring(0, eq), v = w.substring(eq + 1), got = null;
                switch (k) {
                    case "waiters": got = String.valueOf(st.waiters()); break;
                    case "holders": got = String.valueOf(st.holders()); break;
                    case "mode": got = st.mode(); break;
                    case "limit": got = String.valueOf(st.limit()); break;
                    case "value": got = st.value(); break;
                    default: fail("status: unknown field " + k);
                }
                if (!v.equals(got)) return false;
            }
            return true;
        }

        /** lost L within ms [reason=...]: the listener ran, with that reason, before the lease's local deadline. */
        void lostStep(String[] words) {
            Lease l = lease(words[1]);
            long within = 0;
            if (words.length > 3 && words[2].equals("within")) within = Long.parseLong(words[3]);
            Loss seen = null;
            try {
                seen = watched.get(l).loss.get(within, TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                fail(words[1] + " not lost within " + within + " ms");
            } catch (InterruptedException | ExecutionException e) {
                fail(words[1] + ": " + e);
            }
            LostReason r = seen.e().reason();
            if (r != LostReason.EXPIRED && r != LostReason.REJECTED && r != LostReason.UNCONFIRMED) {
                fail(words[1] + ": the listener was told " + r + " (" + seen.e() + "), not a loss");
            }
            String want = opts(words, 2).get("reason");
            if (want != null) {
                String got = r.name().toLowerCase(java.util.Locale.ROOT);
                if (!got.equals(want)) fail(words[1] + " lost with reason " + got + ", expected " + want);
            }
            if (!seen.sampled()) fail(words[1] + ": its local deadline was never seen (remaining() read no time left)");
            if (seen.atNs() >= seen.deadlineNs()) {
                fail(String.format("%s: lost %.1f ms after its local deadline, not before", words[1],
                        (seen.atNs() - seen.deadlineNs()) / 1e6));
            }
        }

        /** contended L n within ms: the client's listener said n for L, within ms, and the lease says n. */
        void contendedStep(String[] words) {
            Lease l = lease(words[1]);
            int want = Integer.parseInt(words[2]);
            long within = words.length > 4 && words[3].equals("within") ? Long.parseLong(words[4]) : 0;
            long end = System.nanoTime() + within * 1_000_000;
            while (told.getOrDefault(l, 0) != want && System.nanoTime() < end) Daemons.sleep(5);
            int got = told.getOrDefault(l, 0);
            if (got != want) fail(words[1] + ": onContended said " + got + ", expected " + want + " within " + within + " ms");
            if (l.waiters() != want) fail(words[1] + ": waiters() " + l.waiters() + ", expected " + want);
        }

        /** A name (or a lockall's list of them) under the partitioned service's tag, in place of the scenario's. */
        String tagged(String names) {
            StringBuilder b = new StringBuilder();
            for (String n : names.split(",", -1)) b.append(b.length() > 0 ? "," : "").append(tag).append(n);
            return b.toString();
        }

        /** The words that are names: c lock|lockall|status|check|break NAME, c spawn job lock|lockall NAME. */
        void tagNames(String[] words) {
            if (words.length >= 5 && words[1].equals("spawn")) {
                words[4] = tagged(words[4]);
            } else if (words.length >= 3 && List.of("lock", "lockall", "status", "check", "break").contains(words[1])) {
                words[2] = tagged(words[2]);
            }
        }

        void line(String text) {
            String left = text, right = "";
            int arrow = text.indexOf(" -> ");
            if (arrow >= 0) {
                left = text.substring(0, arrow);
                right = text.substring(arrow + 4);
            }
            String[] words = left.strip().split("\\s+");
            String[] want = right.isBlank() ? new String[0] : right.strip().split("\\s+");
            if (!tag.isEmpty() && !words[0].equals("scenario")) tagNames(words);
            switch (words[0]) {
                case "scenario":
                    break;
                case "daemon":
                    daemon(words[1]);
                    break;
                case "client":
                    client(words);
                    break;
                case "sleep":
                    Daemons.sleep(Long.parseLong(words[1]));
                    break;
                case "valid":
                    if (!lease(words[1]).isValid()) fail(words[1] + " is not valid");
                    break;
                case "lost":
                    lostStep(words);
                    break;
                case "contended":
                    contendedStep(words);
                    break;
                case "order":
                    if (Long.compareUnsigned(lease(words[1]).token(), lease(words[3]).token()) >= 0) {
                        fail(words[1] + "'s token is not below " + words[3] + "'s");
                    }
                    break;
                case "join": {
                    CompletableFuture<?> j = jobs.get(words[1]);
                    if (j == null) fail("no job " + words[1]);
                    Object l = null;
                    Throwable err = null;
                    try {
                        l = j.get(STEP_MAX_MS, TimeUnit.MILLISECONDS);
                    } catch (ExecutionException e) {
                        err = e.getCause();
                    } catch (TimeoutException e) {
                        fail("job " + words[1] + " still waits");
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        fail("interrupted");
                    }
                    lockOutcome(l, err, want);
                    break;
                }
                default: {
                    SClient s = clients.get(words[0]);
                    if (s == null) fail("no client or step " + words[0]);
                    verb(s, words, want);
                }
            }
        }

        @Override
        public void close() {
            for (Daemons.Proc p : service) p.signal("CONT"); // a paused daemon lets its clients go
            for (CompletableFuture<?> j : jobs.values()) j.cancel(true);
            for (SClient s : clients.values()) s.c().close();
            stop = true;
            sampler.interrupt();
            try {
                sampler.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ds.close();
        }
    }
}
