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
 */
class ConformanceTest {
    static final Duration STATUS_POLL = Duration.ofSeconds(2); // a status step is polled this long
    static final long STEP_MAX_MS = 30_000; // no step waits longer
    static final long SCENARIO_MAX_MS = 120_000;
    static final int PARALLEL = 6;

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
        for (Scenario sc : all) {
            runs.add(pool.submit(() -> {
                try (Run r = new Run(sc)) {
                    r.run();
                }
                return null;
            }));
        }
        pool.shutdown();
        List<DynamicTest> tests = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            Future<?> f = runs.get(i);
            String name = all.get(i).name();
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
        int no;
        final Daemons ds = new Daemons();
        Daemons.Proc redis, d;
        List<String> dargs = List.of();
        final Map<String, SClient> clients = new HashMap<>();
        final Map<String, Lease> leases = new HashMap<>();
        final Map<String, CompletableFuture<?>> jobs = new HashMap<>(); // of a Lease (lock) or Leases (lockall)
        final Map<Lease, Watched> watched = new ConcurrentHashMap<>();
        final Map<Lease, Integer> told = new ConcurrentHashMap<>(); // what onContended said last, by lease
        volatile boolean stop;
        final Thread sampler;

        Run(Scenario sc) {
            this.sc = sc;
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

        void daemon(String what) {
            switch (what) {
                case "none":
                case "redis":
                    if (what.equals("redis")) {
                        redis = ds.startListening("redis", "Ready to accept connections", port -> {
                            Path dir = ds.dir.resolve("redis-" + port);
                            try {
                                Files.createDirectories(dir);
                            } catch (IOException e) {
                                throw new IllegalStateException(e);
                            }
                            return List.of("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                                    "--maxmemory-policy", "noeviction", "--dir", dir.toString());
                        });
                        dargs = List.of("--persist", "redis", "--redis", "redis://127.0.0.1:" + redis.port + "/0");
                    } else {
                        dargs = List.of("--persist", "none");
                    }
                    d = ds.startListening("dlockd", " ready (", port -> {
                        List<String> a = new ArrayList<>(List.of(Daemons.bin(), "--port", String.valueOf(port), "-l", "info"));
                        a.addAll(dargs);
                        return a;
                    });
                    break;
                case "kill9":
                    d.kill();
                    break;
                case "restart":
                    d.kill();
                    d.restart();
                    break;
                case "pause":
                    d.signal("STOP");
                    break;
                case "resume":
                    d.signal("CONT");
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

        void line(String text) {
            String left = text, right = "";
            int arrow = text.indexOf(" -> ");
            if (arrow >= 0) {
                left = text.substring(0, arrow);
                right = text.substring(arrow + 4);
            }
            String[] words = left.strip().split("\\s+");
            String[] want = right.isBlank() ? new String[0] : right.strip().split("\\s+");
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
            if (d != null) d.signal("CONT"); // a paused daemon lets its clients go
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
