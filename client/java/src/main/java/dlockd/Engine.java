package dlockd;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.DoubleFunction;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * The protocol state machine, after the Go client's core.go and client.go: one manager thread owns all state
 * (connections and fail-over, requests and replies, events, renewal and loss, turns); callers hand it closures, the
 * reader thread of the current connection hands it lines, a dialer thread hands it a new connection, and its timed
 * poll wakes it for renewals, lost guards, reconnects and request timeouts. It never blocks on I/O: what it sends goes
 * to the connection's writer thread through a buffer (a server that does not read is dropped).
 */
final class Engine {
    static final double BACKOFF_MIN_MS = 50, BACKOFF_MAX_MS = 1000, REDIRECT_MS = 100, GUARD_MIN_MS = 20;
    static final double RENEW_RETRY_MIN_MS = 10, CLOCK_STEP_MS = 250;
    static final int ALREADY_WAITING_RETRIES = 3, OUT_MAX = 4 << 20;
    static final double NEVER = Double.POSITIVE_INFINITY;
    private static final AtomicInteger IDS = new AtomicInteger();

    enum St { DOWN, CONNECTING, UP, DEAD }

    enum Where { NOWHERE, UNSENT, SENT, WAITING, TURN }

    private static final ReentrantLock CLOCK_MU = new ReentrantLock();
    private static long lastWall = System.currentTimeMillis();
    private static long lastMono = System.nanoTime();
    private static double suspendedMs;
    static final double SUSPEND_MIN_MS = 250;

    /**
     * The client's clock (ms): the monotonic clock, plus the time the machine was suspended. Java has no
     * CLOCK_BOOTTIME (which the Go client reads): the monotonic clock stops during a suspend while the server's and a
     * lease's time go on. So a wall clock that moved SUSPEND_MIN_MS or more past the monotonic one between two reads
     * is taken for a suspend and counted as time passed -- also when it was a step of the wall clock, which only makes
     * leases end early (fail-safe).
     */
    static double nowMs() {
        CLOCK_MU.lock();
        try {
            long mono = System.nanoTime(), wall = System.currentTimeMillis();
            double gap = (wall - lastWall) - (mono - lastMono) / 1e6;
            if (gap >= SUSPEND_MIN_MS) suspendedMs += gap;
            lastWall = wall;
            lastMono = mono;
            return mono / 1e6 + suspendedMs;
        } finally {
            CLOCK_MU.unlock();
        }
    }

    static double slackMs(double ttl) {
        return 2 + ttl / 1000;
    }

    /** One request, from the call that makes it until its outcome. */
    static final class Req {
        String op, name;
        String reason = ""; // BREAK
        long token;
        double ttl, wait, waitEnd = NEVER, start;
        boolean shared, renew, internal, abandoned, resent, lastHold, exposed;
        int limit, retries, seq;
        String tag = "";
        double sentAt;
        Where where = Where.NOWHERE;
        Lease lease;
        Ticket ticket;
        Watch watch;
        double deadline = NEVER;
        boolean timed;
        Wire.Reply header;
        List<String> body;
        boolean finished;
        CompletableFuture<Object> done;
        Runnable hook;

        Req(String op, String name) {
            this.op = op;
            this.name = name;
        }
    }

    /** One acquisition's turn on a name within this client (the server would grant a second LOCK as a reentry). */
    static final class Ticket {
        final String name;
        boolean head;
        Req waiter;

        Ticket(String name) {
            this.name = name;
        }
    }

    /** A message to the manager thread. */
    private static final class In {
        final int gen;
        final boolean dial;
        final Conn conn;
        final String line;
        final Exception err;
        final boolean fatal;

        In(int gen, boolean dial, Conn conn, String line, Exception err, boolean fatal) {
            this.gen = gen;
            this.dial = dial;
            this.conn = conn;
            this.line = line;
            this.err = err;
            this.fatal = fatal;
        }
    }

    private static final Object STOP = new Object();

    /** A connection's writer: the manager appends without blocking, the writer thread writes it out. */
    private final class Writer implements Runnable {
        final Conn conn;
        final int gen;
        final ReentrantLock mu = new ReentrantLock();
        final Condition wake = mu.newCondition();
        byte[] buf = new byte[4096];
        int len;
        int unsent;
        boolean stopped;
        volatile double writingSince = NEVER;

        Writer(Conn conn, int gen) {
            this.conn = conn;
            this.gen = gen;
        }

        int enqueue(byte[] b) {
            mu.lock();
            try {
                if (len + b.length > buf.length) buf = java.util.Arrays.copyOf(buf, Math.max(buf.length * 2, len + b.length));
                System.arraycopy(b, 0, buf, len, b.length);
                len += b.length;
                unsent += b.length;
                wake.signal();
                return unsent;
            } finally {
                mu.unlock();
            }
        }

        void stop() {
            mu.lock();
            try {
                stopped = true;
                wake.signal();
            } finally {
                mu.unlock();
            }
        }

        @Override
        public void run() {
            byte[] out = new byte[4096];
            while (true) {
                int n;
                mu.lock();
                try {
                    while (len == 0 && !stopped) wake.awaitUninterruptibly();
                    if (stopped) return;
                    byte[] t = out;
                    out = buf;
                    buf = t;
                    n = len;
                    len = 0;
                } finally {
                    mu.unlock();
                }
                try {
                    writingSince = nowMs();
                    conn.write(out, 0, n);
                    writingSince = NEVER;
                } catch (IOException e) {
                    post(new In(gen, false, null, null, new IOException("write: " + e.getMessage(), e), false));
                    return;
                } finally {
                    mu.lock();
                    unsent -= n;
                    mu.unlock();
                }
            }
        }
    }

    final Config cfg;
    final String owner;
    final int id = IDS.incrementAndGet();

    // owned by the manager thread
    String key;
    double defaultTTL = Wire.DEFAULT_TTL_MS;
    St state = St.DOWN;
    boolean ready;
    DlockException fatal;
    boolean closing;
    Conn conn;
    Writer w;
    int gen;
    final StringBuilder out = new StringBuilder();
    final ArrayDeque<Req> fifo = new ArrayDeque<>();
    List<Req> unsent = new ArrayList<>();
    final PriorityQueue<Req> timed = new PriorityQueue<>(Comparator.comparingDouble(q -> q.deadline));
    Map<String, Req> waiting = new HashMap<>();
    Req bodyReq;
    int bodyLeft;
    int crossing;
    int seq;
    final List<Lease> leases = new ArrayList<>();
    final Map<String, ArrayDeque<Ticket>> turns = new HashMap<>();
    final int naddrs;
    int addrI;
    int hint = -1;
    int failedI = -1;
    boolean standby;
    double reconnectAt;
    double backoff = BACKOFF_MIN_MS;
    String lastError = "";
    boolean sessionOK;
    boolean dropWanted;
    boolean descRefused;
    double helloBy;
    String cluster;
    String clusterFrom = "";
    int clusterRefused;
    String clusterWhy = "";
    boolean insane;
    int crossedGrants; // grants that crossed the CANCEL of a wait given up, given back (for tests)
    final List<Watch> watches = new ArrayList<>();

    // shared
    private final LinkedBlockingQueue<Object> inbox = new LinkedBlockingQueue<>();
    /** Lines read and not yet handled: a reader waits while 1024 are (a server faster than the manager). */
    private final java.util.concurrent.Semaphore linesInFlight = new java.util.concurrent.Semaphore(1024);
    final CompletableFuture<Void> readyF = new CompletableFuture<>();
    volatile boolean quit;
    private final Thread manager;
    private final List<Thread> threads = new ArrayList<>(); // every thread started (guarded by threadsMu)
    private final ReentrantLock threadsMu = new ReentrantLock();
    private Object dialing; // the socket being dialed (guarded by threadsMu), closed on shutdown
    final ExecutorService callbacks;
    private volatile Thread callbackThread;
    private final ReentrantLock pubMu = new ReentrantLock();
    private String pubKey, pubCluster;

    Engine(Config cfg) {
        this.cfg = cfg;
        String o = cfg.owner;
        if (o.isEmpty()) {
            byte[] b = new byte[8];
            new java.security.SecureRandom().nextBytes(b);
            StringBuilder s = new StringBuilder("java-");
            for (byte x : b) s.append(String.format("%02x", x & 0xff));
            o = s.toString();
        }
        this.owner = o;
        this.key = cfg.key;
        this.cluster = cfg.cluster;
        this.naddrs = cfg.addrs.size();
        this.pubKey = key;
        this.pubCluster = cluster;
        this.callbacks = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "dlockd-callbacks-" + id);
            t.setDaemon(true);
            callbackThread = t;
            return t;
        });
        manager = newThread("dlockd-manager-" + id, this::run);
        manager.start();
    }

    private Thread newThread(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        threadsMu.lock();
        try {
            threads.removeIf(x -> !x.isAlive() && x.getState() == Thread.State.TERMINATED);
            threads.add(t);
        } finally {
            threadsMu.unlock();
        }
        return t;
    }

    // ---- calls from other threads -------------------------------------------------------

    /** A closure for the manager thread, or its rejection once the client is closed. */
    static final class Call {
        final Runnable run;
        final Runnable reject;

        Call(Runnable run, Runnable reject) {
            this.run = run;
            this.reject = reject;
        }
    }

    void post(Object m) {
        inbox.add(m);
        if (quit) drainRejected();
    }

    private void drainRejected() {
        Object m;
        while ((m = inbox.poll()) != null) {
            if (m instanceof Call) {
                ((Call) m).reject.run();
            } else if (m instanceof In) {
                In x = (In) m;
                if (x.conn != null) x.conn.close();
                if (x.line != null) linesInFlight.release();
            }
        }
    }

    /** Runs f on the manager thread; false if the client is closed. */
    boolean exec(Runnable f) {
        if (Thread.currentThread() == manager) {
            f.run();
            return true;
        }
        CompletableFuture<Boolean> ran = new CompletableFuture<>();
        post(new Call(() -> {
            f.run();
            ran.complete(true);
        }, () -> ran.complete(false)));
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return ran.get();
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (java.util.concurrent.ExecutionException e) {
                    throw new IllegalStateException(e.getCause());
                }
            }
        } finally {
            if (interrupted) Thread.currentThread().interrupt();
        }
    }

    /**
     * Submits the request build makes (on the manager thread) with the server timeout as its deadline; the future
     * completes with its outcome.
     */
    CompletableFuture<Object> submitCall(DoubleFunction<Req> build, boolean exposed) {
        return submitCall(build, exposed, new CompletableFuture<>());
    }

    CompletableFuture<Object> submitCall(DoubleFunction<Req> build, boolean exposed, CompletableFuture<Object> f) {
        post(new Call(() -> {
            double now = nowMs();
            Req q;
            try {
                q = build.apply(now);
            } catch (RuntimeException e) {
                f.completeExceptionally(e);
                return;
            }
            if (q == null) {
                f.complete(null);
                return;
            }
            q.done = f;
            q.exposed = exposed;
            reqOf.put(f, q);
            if (q.where == Where.TURN) {
                if (q.wait > 0) setReqDeadline(q, q.start + q.wait);
            } else {
                setReqDeadline(q, now + serverTimeoutMs());
                submit(q, now);
            }
        }, () -> f.completeExceptionally(DlockException.of(DlockException.Kind.CLOSED, "the client is closed"))));
        return f;
    }

    /** The request of each pending future (manager thread only): to give it up. */
    private final Map<CompletableFuture<Object>, Req> reqOf = new java.util.IdentityHashMap<>();

    /** Gives up the call of future f (from any thread): the manager cleans up what it still brings. */
    void abandon(CompletableFuture<Object> f, DlockException why) {
        post(new Call(() -> {
            Req q = reqOf.get(f);
            if (q != null) abandon(q, why);
        }, () -> { }));
    }

    /** Waits for a call's outcome; an interrupt gives the call up and throws DlockInterruptedException. */
    Object await(CompletableFuture<Object> f) {
        try {
            return f.get();
        } catch (InterruptedException e) {
            abandon(f, DlockException.of(DlockException.Kind.INTERRUPTED, "interrupted"));
            Object r = awaitUninterruptibly(f);
            Thread.currentThread().interrupt();
            return r;
        } catch (java.util.concurrent.ExecutionException e) {
            throw rethrow(e.getCause());
        } catch (java.util.concurrent.CancellationException e) {
            throw DlockException.of(DlockException.Kind.INTERRUPTED, "cancelled");
        }
    }

    Object awaitUninterruptibly(CompletableFuture<Object> f) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return f.get();
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (java.util.concurrent.ExecutionException e) {
                    throw rethrow(e.getCause());
                }
            }
        } finally {
            if (interrupted) Thread.currentThread().interrupt();
        }
    }

    static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException) return (RuntimeException) t;
        if (t instanceof Error) throw (Error) t;
        return new IllegalStateException(t);
    }

    double serverTimeoutMs() {
        return cfg.serverTimeout.toNanos() / 1e6;
    }

    double connectTimeoutMs() {
        return cfg.connectTimeout.toNanos() / 1e6;
    }

    double guardMs(double ttl) {
        if (cfg.lostGuard != null) return cfg.lostGuard.toNanos() / 1e6;
        return Math.max(ttl / 10, GUARD_MIN_MS);
    }

    String publicKey() {
        pubMu.lock();
        try {
            return pubKey;
        } finally {
            pubMu.unlock();
        }
    }

    String publicCluster() {
        pubMu.lock();
        try {
            return pubCluster;
        } finally {
            pubMu.unlock();
        }
    }

    void setKey(String k) {
        key = k;
        pubMu.lock();
        pubKey = k;
        pubMu.unlock();
    }

    void setCluster(String cid, String from) {
        cluster = cid;
        clusterFrom = from;
        pubMu.lock();
        pubCluster = cid;
        pubMu.unlock();
    }

    /** Runs user code off the manager thread. */
    void callback(Runnable r) {
        try {
            callbacks.execute(() -> {
                try {
                    r.run();
                } catch (RuntimeException e) {
                    Thread t = Thread.currentThread();
                    t.getUncaughtExceptionHandler().uncaughtException(t, e);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException ignored) {
            // closed
        }
    }

    /** Stops the client: every thread it started has ended when this returns (but for a callback calling it). */
    void close() {
        quit();
        try {
            if (Thread.currentThread() != manager) manager.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        List<Thread> ts;
        threadsMu.lock();
        try {
            ts = new ArrayList<>(threads);
        } finally {
            threadsMu.unlock();
        }
        boolean interrupted = false;
        for (Thread t : ts) {
            if (t == Thread.currentThread()) continue;
            while (true) {
                try {
                    t.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        callbacks.shutdown();
        if (Thread.currentThread() != callbackThread) {
            try {
                if (!callbacks.awaitTermination(10, TimeUnit.SECONDS)) callbacks.shutdownNow();
            } catch (InterruptedException e) {
                interrupted = true;
                callbacks.shutdownNow();
            }
        }
        if (interrupted) Thread.currentThread().interrupt();
    }

    void quit() {
        inbox.add(STOP);
    }

    // ---- the manager thread --------------------------------------------------------------

    private void run() {
        try {
            loop();
        } finally {
            quit = true;
            drainRejected();
        }
    }

    private void loop() {
        while (true) {
            double now = nowMs();
            double next = tick(now);
            if (takeDrop()) {
                drop(now);
                continue;
            }
            if (state == St.DOWN && !closing) {
                if (now >= reconnectAt) startConnect(now);
                else next = Math.min(next, reconnectAt);
            }
            flush();
            if (takeDrop()) {
                drop(now);
                continue;
            }
            // a write blocked for the server timeout (at least a second: not a thread that waited for a CPU)
            if (w != null && nowMs() - w.writingSince > Math.max(serverTimeoutMs(), 1000)) {
                lastError = here() + ": the server does not read (a write blocked for the server timeout)";
                drop(nowMs());
                continue;
            }
            if (w != null) next = Math.min(next, nowMs() + serverTimeoutMs() / 4);
            double d = next - nowMs();
            if (!leases.isEmpty() && d > CLOCK_STEP_MS) d = CLOCK_STEP_MS;
            if (d > 3600e3) d = 3600e3;
            if (d < 1) d = 1;
            Object m;
            try {
                m = inbox.poll((long) (d * 1000), TimeUnit.MICROSECONDS);
            } catch (InterruptedException e) {
                m = STOP;
            }
            if (m == null) continue;
            if (m == STOP) {
                shutdown();
                return;
            }
            if (m instanceof Call) {
                ((Call) m).run.run();
            } else {
                In x = (In) m;
                if (x.line != null) linesInFlight.release();
                handle(x, nowMs());
            }
        }
    }

    private void handle(In m, double now) {
        if (m.dial) {
            threadsMu.lock();
            dialing = null;
            threadsMu.unlock();
            if (m.gen != gen || state != St.CONNECTING) {
                if (m.conn != null) m.conn.close();
                return;
            }
            if (m.err != null) {
                connectFailed(now, m.err.getMessage() == null ? m.err.toString() : m.err.getMessage(), m.fatal);
                return;
            }
            conn = m.conn;
            w = new Writer(m.conn, gen);
            final int g = gen;
            final Conn c = m.conn;
            newThread("dlockd-reader-" + id + "-" + g, () -> reader(g, c)).start();
            newThread("dlockd-writer-" + id + "-" + g, w).start();
            connected(now);
            return;
        }
        if (m.gen != gen || state != St.UP) return;
        if (m.err != null) {
            if (sessionOK || lastError.isEmpty()) lastError = here() + ": " + m.err.getMessage();
            drop(now);
            return;
        }
        if (!lineIn(m.line, now)) drop(now);
    }

    private void startConnect(double now) {
        state = St.CONNECTING;
        gen++;
        Config.Address a = cfg.addrs.get(addrI);
        double timeout = connectTimeoutMs();
        if (!ready && naddrs > 1) timeout /= naddrs;
        final int g = gen;
        final long tms = Math.max(1, (long) timeout);
        newThread("dlockd-dial-" + id + "-" + g, () -> dial(g, a, tms)).start();
    }

    private void dial(int g, Config.Address a, long timeoutMs) {
        Conn c = null;
        Exception err = null;
        boolean fatalErr = false;
        try {
            if (a.path != null) {
                SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
                if (!setDialing(ch)) {
                    ch.close();
                    return;
                }
                try {
                    ch.connect(UnixDomainSocketAddress.of(a.path));
                } catch (IOException e) {
                    ch.close();
                    throw e;
                }
                c = new Conn.OfChannel(ch);
            } else {
                Socket raw = new Socket();
                if (!setDialing(raw)) {
                    raw.close();
                    return;
                }
                try {
                    long start = System.nanoTime();
                    raw.connect(new InetSocketAddress(a.host, a.port), (int) Math.min(timeoutMs, Integer.MAX_VALUE));
                    raw.setTcpNoDelay(true);
                    if (cfg.tls != null) {
                        String sn = cfg.tlsServerName.isEmpty() ? a.host : cfg.tlsServerName;
                        SSLSocket s = (SSLSocket) cfg.tls.createSocket(raw, sn, a.port, true);
                        SSLParameters p = s.getSSLParameters();
                        p.setEndpointIdentificationAlgorithm("HTTPS");
                        if (!isIpLiteral(sn)) p.setServerNames(List.of(new SNIHostName(sn)));
                        p.setProtocols(supported(s.getSupportedProtocols()));
                        s.setSSLParameters(p);
                        long left = timeoutMs - (System.nanoTime() - start) / 1_000_000;
                        raw.setSoTimeout((int) Math.max(1, Math.min(left, Integer.MAX_VALUE)));
                        s.startHandshake();
                        raw.setSoTimeout(0);
                        c = new Conn.OfSocket(raw, s);
                    } else {
                        c = new Conn.OfSocket(raw, raw);
                    }
                } catch (IOException | RuntimeException e) {
                    raw.close();
                    throw e;
                }
            }
        } catch (SSLHandshakeException e) {
            err = new IOException("TLS: " + e.getMessage(), e);
            for (Throwable t = e; t != null; t = t.getCause()) {
                if (t instanceof CertificateException || t instanceof java.security.cert.CertPathValidatorException) fatalErr = true;
            }
        } catch (IOException | RuntimeException e) {
            err = e;
        }
        post(new In(g, true, c, null, err, fatalErr));
    }

    private static String[] supported(String[] all) {
        List<String> out = new ArrayList<>();
        for (String p : all) if (p.equals("TLSv1.2") || p.equals("TLSv1.3")) out.add(p);
        return out.toArray(new String[0]);
    }

    private static boolean isIpLiteral(String h) {
        return h.indexOf(':') >= 0 || h.matches("[0-9.]+");
    }

    private boolean setDialing(Object s) {
        threadsMu.lock();
        try {
            if (quit || closing) return false;
            dialing = s;
            return true;
        } finally {
            threadsMu.unlock();
        }
    }

    private void reader(int g, Conn c) {
        byte[] tmp = new byte[32768];
        byte[] buf = new byte[4096];
        int len = 0;
        Exception err = null;
        while (err == null) {
            int n;
            try {
                n = c.read(tmp);
            } catch (IOException e) {
                err = e;
                n = 0;
            }
            if (n < 0) {
                err = new IOException("the server closed the connection");
                n = 0;
            }
            if (len + n > buf.length) buf = java.util.Arrays.copyOf(buf, Math.max(buf.length * 2, len + n));
            System.arraycopy(tmp, 0, buf, len, n);
            len += n;
            int start = 0;
            for (int i = 0; i < len; i++) {
                if (buf[i] != '\n') continue;
                int end = i;
                if (end > start && buf[end - 1] == '\r') end--;
                if (end - start > Wire.REPLY_LINE_MAX) {
                    err = new IOException("a line longer than the protocol allows");
                    break;
                }
                try {
                    while (!linesInFlight.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                        if (quit) return;
                    }
                } catch (InterruptedException e) {
                    return;
                }
                post(new In(g, false, null, new String(buf, start, end - start, StandardCharsets.ISO_8859_1), null, false));
                start = i + 1;
            }
            System.arraycopy(buf, start, buf, 0, len - start);
            len -= start;
            if (err == null && len > Wire.REPLY_LINE_MAX) err = new IOException("a line longer than the protocol allows");
            if (quit) return;
        }
        post(new In(g, false, null, null, err, false));
    }

    /** Hands what was formatted to the writer; never blocks. */
    private void flush() {
        if (out.length() == 0) return;
        if (w == null || state != St.UP) {
            out.setLength(0);
            return;
        }
        int n = w.enqueue(out.toString().getBytes(StandardCharsets.ISO_8859_1));
        out.setLength(0);
        if (n > OUT_MAX) {
            lastError = here() + ": the server does not read (" + n + " bytes unsent)";
            dropWanted = true;
        }
    }

    private void closeConn() {
        if (w != null) {
            w.stop();
            w = null;
        }
        if (conn != null) {
            conn.close();
            conn = null;
        }
    }

    private boolean takeDrop() {
        boolean d = dropWanted;
        dropWanted = false;
        return d && state == St.UP;
    }

    private void drop(double now) {
        closeConn();
        gen++;
        connectionLost(now);
    }

    String here() {
        return cfg.addrs.get(addrI).name;
    }

    private void shutdown() {
        closing = true;
        DlockException err = DlockException.of(DlockException.Kind.CLOSED, "the client is closed");
        if (bodyReq != null) {
            finish(bodyReq, err, null);
            bodyReq = null;
        }
        for (Req q : new ArrayList<>(fifo)) finish(q, err, null);
        for (Req q : new ArrayList<>(waiting.values())) finish(q, err, null);
        for (Req q : new ArrayList<>(unsent)) finish(q, err, null);
        for (Req q : new ArrayList<>(reqOf.values())) finish(q, err, null);
        fifo.clear();
        unsent.clear();
        waiting.clear();
        state = St.DEAD;
        for (Lease l : new ArrayList<>(leases)) {
            if (l.lostM == LostReason.NOT_LOST && !l.released) lose(l, LostReason.CLIENT_CLOSED, "");
        }
        for (Watch x : watches) x.end();
        watches.clear();
        closeConn();
        threadsMu.lock();
        try {
            quit = true;
            if (dialing instanceof Socket) ((Socket) dialing).close();
            else if (dialing instanceof SocketChannel) ((SocketChannel) dialing).close();
        } catch (IOException ignored) {
            // closing
        } finally {
            threadsMu.unlock();
        }
        signalReady();
    }

    void signalReady() {
        readyF.complete(null);
    }

    // ---- connections ---------------------------------------------------------------------

    private void connectFailed(double now, String why, boolean isFatal) {
        state = St.DOWN;
        if (why != null && !why.isEmpty()) lastError = here() + ": " + why;
        if (isFatal && !ready && naddrs == 1) {
            fatal = DlockException.of(DlockException.Kind.UNAVAILABLE, lastError);
            signalReady();
        }
        failedI = addrI;
        addrI = (addrI + 1) % naddrs;
        reconnectAt = now + backoff;
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }

    /** The transport is up: say who we are, and nothing else until HELLO is answered by a server of our cluster. */
    private void connected(double now) {
        state = St.UP;
        sessionOK = false;
        dropWanted = false;
        double t = connectTimeoutMs();
        if (!ready && naddrs > 1) t /= naddrs;
        helloBy = now + t;
        out.setLength(0);
        crossing = 0;
        if (!cfg.password.isEmpty()) internal("AUTH", "", 0, false);
        internal("HELLO", "", 0, false);
    }

    /** HELLO was answered OK: describe, confirm the leases within their deadline, send what was kept, watch again. */
    private void session(double now) {
        if (cfg.describe && !descRefused) internal("DESCRIBE", "", 0, false);
        for (Lease l : new ArrayList<>(leases)) {
            if (l.live() && l.deadlineM > now) renewLease(l, now);
        }
        List<Req> kept = unsent;
        unsent = new ArrayList<>();
        for (Req q : kept) {
            q.where = Where.NOWHERE;
            if (q.op.equals("LOCK") && q.wait > 0 && q.waitEnd <= now) {
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "the wait ran out while reconnecting"), null);
            } else {
                write(q, now);
            }
        }
        rewatch();
    }

    private void connectionLost(double now) {
        if (state == St.DEAD) return;
        out.setLength(0);
        List<Req> pending = new ArrayList<>();
        if (bodyReq != null) {
            pending.add(bodyReq);
            bodyReq = null;
        }
        pending.addAll(fifo);
        List<Req> ws = new ArrayList<>(waiting.values());
        ws.sort(Comparator.comparingInt(q -> q.seq));
        pending.addAll(ws);
        fifo.clear();
        waiting = new HashMap<>();
        List<Req> kept = new ArrayList<>();
        for (Req q : pending) {
            if (keepOverDrop(q)) {
                q.where = Where.UNSENT;
                kept.add(q);
            }
        }
        kept.addAll(unsent);
        unsent = kept;
        if (clusterRefused >= naddrs) {
            for (Req q : unsent) finish(q, DlockException.of(DlockException.Kind.CLUSTER_MISMATCH, clusterWhy), null);
            unsent = new ArrayList<>();
        }
        if (closing || (!ready && fatal != null)) {
            die(DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed"));
            return;
        }
        state = St.DOWN;
        reconnectAt = now;
        if (!standby && !sessionOK) {
            connectFailed(now, "", false); // closed before it said who we are: as a failed connect
        } else if (standby) {
            if (hint >= 0 && hint != addrI && hint != failedI) {
                addrI = hint;
            } else if (hint >= 0 && hint == failedI) {
                failedI = -1; // the active it names did not answer: ask again
                reconnectAt = now + REDIRECT_MS;
            } else {
                addrI = (addrI + 1) % naddrs;
                reconnectAt = now + REDIRECT_MS;
            }
        } else if (hint >= 0) {
            addrI = hint; // * BYE not-active said where
        }
        sessionOK = false;
        standby = false;
        hint = -1;
    }

    /** True to write q again on the next connection. */
    private boolean keepOverDrop(Req q) {
        if (q.internal) {
            if ((q.op.equals("RENEW") || q.op.equals("RECLAIM")) && q.lease != null) q.lease.refreshing = false;
            return q.op.equals("UNLOCK") && q.lastHold;
        }
        if (q.abandoned || q.finished) {
            if (q.op.equals("UNLOCK") && q.lastHold) {
                q.internal = true; // still release it
                return true;
            }
            finish(q, DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed"), null);
            return false;
        }
        if (q.op.equals("BREAK") && !standby) {
            // written, not answered: it may have broken the lease, and a BREAK written again would say STALE of its own work
            finish(q, DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed; the outcome is unknown"), null);
            return false;
        }
        if (q.op.equals("UNLOCK") && !q.lastHold && !standby) {
            finish(q, DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed; the outcome is unknown"), null);
            return false;
        }
        q.body = null;
        q.resent = true;
        return true;
    }

    private void die(DlockException err) {
        state = St.DEAD;
        for (Req q : new ArrayList<>(unsent)) finish(q, err, null);
        unsent = new ArrayList<>();
    }

    // ---- input ---------------------------------------------------------------------------

    /** Handles one line; false when the connection must be dropped. */
    private boolean lineIn(String s, double now) {
        Req bq = bodyReq;
        if (bq != null) {
            bq.body.add(s);
            if (--bodyLeft == 0) {
                bodyReq = null;
                bodyDone(bq);
            }
            return true;
        }
        Wire.Reply r = Wire.parseReply(s);
        if (r == null) {
            lastError = here() + ": not the dlockd protocol: " + Wire.trunc(s);
            return false;
        }
        if (r.kind.equals("*")) {
            event(r, now);
            if (insane) {
                insane = false;
                return false;
            }
            return true;
        }
        Req q = fifo.peekFirst();
        if (q == null) return false; // a reply to nothing
        if (!r.tag.isEmpty() && !r.tag.equals(q.tag)) return false;
        if (standbyReply(q, r) || clusterReply(q, r)) return false;
        fifo.pollFirst();
        q.where = Where.NOWHERE;
        reply(q, r, now);
        if (insane) {
            insane = false;
            return false;
        }
        return true;
    }

    private boolean standbyReply(Req q, Wire.Reply r) {
        String active;
        if (r.is("ERR", "NOT_ACTIVE")) {
            String a0 = r.arg(0);
            active = a0 != null && a0.startsWith("active=") ? a0.substring(7) : "";
        } else if (q.op.equals("HELLO") && r.kind.equals("OK") && r.kvs("role").equals("standby")) {
            active = r.kvs("active");
        } else {
            return false;
        }
        standby = true;
        lastError = here() + ": a standby (the active: " + active + ")";
        setHint(active);
        return true;
    }

    private void setHint(String active) {
        hint = -1;
        for (int i = 0; i < cfg.addrs.size(); i++) {
            String n = cfg.addrs.get(i).name;
            if (!n.isEmpty() && n.equals(active)) {
                hint = i;
                return;
            }
        }
    }

    /** The first cluster id met is the client's; a server that names another is refused like a standby. */
    private boolean clusterReply(Req q, Wire.Reply r) {
        if (!q.op.equals("HELLO") || !r.kind.equals("OK")) return false;
        String cid = r.kvs("cluster");
        if (cid.isEmpty() || cid.equals("-")) return false;
        String h = here();
        if (cluster.isEmpty() && cid.length() == 32) {
            setCluster(cid, h);
        } else if (cfg.cluster.isEmpty() && cid.length() == 32 && h.equals(clusterFrom)) {
            setCluster(cid, h); // the server the id came from restarted as another lock table
        }
        if (cid.equals(cluster)) {
            clusterRefused = 0;
            return false;
        }
        clusterRefused++;
        standby = true;
        hint = -1;
        if (!clusterFrom.isEmpty()) {
            clusterWhy = "servers " + clusterFrom + " and " + h + " are two clusters (ids " + cluster + ", " + cid
                    + "): check their redis URL, db and prefix";
        } else {
            clusterWhy = "server " + h + " is of cluster " + cid + ", not " + cluster
                    + " (the cluster asked for): check its redis URL, db and prefix";
        }
        lastError = clusterWhy;
        if (clusterRefused >= naddrs && !ready) {
            fatal = DlockException.of(DlockException.Kind.CLUSTER_MISMATCH, clusterWhy);
            signalReady();
        }
        return true;
    }

    private static int holdsOf(Wire.Reply r) {
        return Wire.atoi(r.kvs("holds"));
    }

    /** A grant, confirmation or wait's end for q's lock must name it, and a holds= must count at least this hold. */
    private boolean notOf(Req q, Wire.Reply r) {
        if (q.name.equals(r.arg(0))) {
            if (r.kv("holds") == null || holdsOf(r) > 0) return false;
        }
        insane = true;
        return true;
    }

    private void event(Wire.Reply r, double now) {
        if (r.word.equals("BYE")) {
            String a = r.kvs("active");
            if (!a.isEmpty()) setHint(a);
            lastError = here() + ": " + r.text();
            return;
        }
        if (r.word.equals("WATCH-OVERFLOW")) {
            int n = Wire.atoi(r.arg(0));
            for (Watch x : watches) x.deliver(WatchEvent.of(WatchEvent.Kind.OVERFLOW, "", n));
            return;
        }
        if (r.args.isEmpty()) return; // something newer than us
        String name = r.args.get(0);
        switch (r.word) {
            case "GRANTED": {
                Long token = r.uarg(1);
                if (token == null || token == 0) {
                    insane = true;
                    return;
                }
                int holds = holdsOf(r);
                Req q = waiting.get(r.tag);
                if (r.tag.isEmpty() || q == null) {
                    // nobody waits: a grant that crossed the CANCEL of a wait given up
                    if (crossing == 0) {
                        insane = true;
                        return;
                    }
                    crossing--;
                    crossedGrants++;
                    if (holds > ownHolds(name, token) + 1) internal("UNLOCK", name, token, false);
                    else cleanupGrant(name, token);
                    return;
                }
                waiting.remove(r.tag);
                if (notOf(q, r)) {
                    finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                    return;
                }
                if (heldElsewhere(q, token, holds)) return;
                // The TTL began when the server granted it, before this line reached us: confirm, count from then.
                q.token = token;
                q.op = "CONFIRM";
                setReqDeadline(q, now + serverTimeoutMs());
                write(q, now);
                break;
            }
            case "TIMEOUT": {
                Req q = waiting.get(r.tag);
                if (r.tag.isEmpty() || q == null) return;
                waiting.remove(r.tag);
                if (notOf(q, r)) {
                    finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may end this wait so: " + r.text()), null);
                    return;
                }
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "waited in vain for " + name), null);
                break;
            }
            case "EXPIRED": {
                long token = Wire.atou(r.arg(1));
                for (Lease l : new ArrayList<>(leases)) {
                    if (l.name.equals(name) && l.token == token && l.live()) lose(l, LostReason.EXPIRED, r.kvs("broken_by"));
                }
                break;
            }
            case "EXPIRING": {
                long token = Wire.atou(r.arg(1));
                for (Lease l : leases) if (l.name.equals(name) && l.token == token) risk(l);
                break;
            }
            case "WATCH": {
                if (r.args.size() < 4) return;
                WatchEvent ev = new WatchEvent(WatchEvent.kindOf(r.args.get(1)), name, r.args.get(2), r.kvs("user"),
                        Wire.atou(r.args.get(3)), Wire.atoi(r.kvs("holders")), r.kvs("broken_by"), 0);
                for (Watch x : watches) if (x.matches(name)) x.deliver(ev);
                break;
            }
            default:
                break;
        }
    }

    // ---- replies -------------------------------------------------------------------------

    private void reply(Req q, Wire.Reply r, double now) {
        boolean handled = false;
        switch (q.op) {
            case "LOCK":
                handled = rLock(q, r, now);
                break;
            case "CONFIRM":
                handled = rConfirm(q, r, now);
                break;
            case "UNLOCK":
                handled = rUnlock(q, r, now);
                break;
            case "REFRESH": case "RENEW": case "RECLAIM":
                handled = rRefresh(q, r, now);
                break;
            case "BREAK":
                if (r.is("OK", "BROKEN")) {
                    finish(q, null, null);
                    handled = true;
                } else if (r.is("NO", "STALE")) {
                    finish(q, new LeaseLostException(r.word, r.text(), "the token holds nothing of " + q.name, LostReason.NOT_LOST, null), null);
                    handled = true;
                }
                break;
            case "CHECK":
                if (r.is("OK", "VALID")) {
                    Long n = r.uarg(2);
                    finish(q, null, n == null ? 0L : n);
                    handled = true;
                } else if (r.is("NO", "STALE")) {
                    finish(q, new LeaseLostException(r.word, r.text(), "the token does not hold " + q.name, LostReason.NOT_LOST, null), null);
                    handled = true;
                }
                break;
            case "HELLO":
                handled = rHello(q, r, now);
                break;
            case "DESCRIBE":
                if (!r.kind.equals("OK")) descRefused = true; // a server of 0.3: nothing more is said
                finish(q, null, null);
                handled = true;
                break;
            case "AUTH":
                if (!r.kind.equals("OK")) {
                    DlockException err = DlockException.ofReply(r);
                    if (!ready) {
                        fatal = err;
                        signalReady();
                    }
                    lastError = here() + ": " + r.text();
                    dropWanted = true;
                    finish(q, err, null);
                } else {
                    finish(q, null, null);
                }
                handled = true;
                break;
            case "STATUS":
                if (r.is("OK", "STATUS")) {
                    finish(q, null, Status.of(q.name, r));
                    handled = true;
                }
                break;
            case "HOLDERS":
                handled = rBody(q, r);
                break;
            case "WATCH": case "REWATCH":
                handled = rWatch(q, r);
                break;
            case "PING": case "CANCEL": case "UNWATCH":
                if (r.kind.equals("OK")) {
                    finish(q, null, null);
                    handled = true;
                }
                break;
            default:
                break;
        }
        if (handled) return;
        if (r.kind.equals("OK")) finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "unexpected reply: " + r.text()), null);
        else finish(q, DlockException.ofReply(r), null);
    }

    /** The holds of lease (name, token) this client had at the server when it executed the request being answered. */
    private int ownHolds(String name, long token) {
        int n = 0;
        for (Lease l : leases) if (l.name.equals(name) && l.token == token && !l.released && !l.unlocking) n++;
        for (Req q : fifo) {
            if ((q.op.equals("UNLOCK") || q.op.equals("CONFIRM")) && q.name.equals(name) && q.token == token) n++;
        }
        return n;
    }

    /** A grant with more holds than this client's and this one is another process's of the owner too: give it back. */
    private boolean heldElsewhere(Req q, long token, int holds) {
        int mine = ownHolds(q.name, token);
        if (holds <= mine + 1) return false;
        internal("UNLOCK", q.name, token, false);
        if (q.abandoned) {
            finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "given up"), null);
            return true;
        }
        finish(q, DlockException.of(DlockException.Kind.HELD_BY_OWNER, q.name + " is held by owner " + owner
                + " in another process: its lease " + Wire.u64(token) + " has " + holds + " holds, " + (mine + 1)
                + " of them this client's; the new one was given back"), null);
        return true;
    }

    private double mostTTL(Req q, long token) {
        double most = q.ttl;
        for (Lease l : leases) {
            if (l.name.equals(q.name) && l.token == token && l.lostM == LostReason.NOT_LOST && l.ttl > most) most = l.ttl;
        }
        return most;
    }

    private boolean rLock(Req q, Wire.Reply r, double now) {
        if (r.is("OK", "GRANTED")) {
            Long token = r.uarg(1);
            Long ms = r.uarg(2);
            if (notOf(q, r) || token == null || token == 0) {
                insane = true;
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                return true;
            }
            if (heldElsewhere(q, token, holdsOf(r))) return true;
            if (ms == null || ms < 0 || ms > mostTTL(q, token)) {
                insane = true;
                cleanupGrant(q.name, token);
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                return true;
            }
            granted(q, token, ms, q.sentAt, r);
        } else if (r.is("OK", "QUEUED")) {
            if (q.abandoned || q.finished) {
                crossing++; // its grant may cross the CANCEL
                internal("CANCEL", q.name, 0, false);
                return true;
            }
            q.where = Where.WAITING;
            waiting.put(q.tag, q);
            setReqDeadline(q, q.wait >= 0 ? q.waitEnd + serverTimeoutMs() : NEVER);
        } else if (r.is("NO", "ALREADY_WAITING") && !q.abandoned && q.retries < ALREADY_WAITING_RETRIES) {
            // a LOCK of ours that was given up still waits: the CANCEL of its clean-up went out before this reply
            q.retries++;
            write(q, now);
        } else {
            return false;
        }
        return true;
    }

    private boolean rConfirm(Req q, Wire.Reply r, double now) {
        if (r.is("OK", "REFRESHED")) {
            Long ms = r.uarg(1);
            if (notOf(q, r) || ms == null || ms > q.ttl) {
                insane = true;
                cleanupGrant(q.name, q.token);
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may confirm this: " + r.text()), null);
                return true;
            }
            granted(q, q.token, ms, q.sentAt, r);
        } else if (r.is("NO", "NOT_HOLDER")) {
            if (!q.abandoned && !q.finished && (q.wait < 0 || q.waitEnd > now)) {
                q.op = "LOCK"; // expired before we could confirm it: again
                write(q, now);
            } else {
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "the grant expired before it was confirmed"), null);
            }
        } else {
            cleanupGrant(q.name, q.token);
            finish(q, DlockException.ofReply(r), null);
        }
        return true;
    }

    private void granted(Req q, long token, double ms, double sentAt, Wire.Reply r) {
        if (q.abandoned || q.finished) {
            cleanupGrant(q.name, token);
            finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "given up"), null);
            return;
        }
        Lease.Mode mode = q.shared ? Lease.Mode.SHARED : q.limit > 1 ? Lease.Mode.SEMAPHORE : Lease.Mode.EXCLUSIVE;
        Lease l = new Lease(this, q.name, token, mode, Math.max(q.limit, 1));
        l.noteProof(r);
        l.ttl = q.ttl;
        l.renew = q.renew;
        confirmLease(l, q, sentAt, ms);
        double now = nowMs();
        if (now >= l.deadlineM - guardMs(l.ttl)) {
            // The reply came so late that the lease is inside its lost guard: give it back; ask again while the wait lasts.
            cleanupGrant(q.name, token);
            if (q.wait < 0 || (q.wait > 0 && q.waitEnd > now)) {
                q.op = "LOCK";
                setReqDeadline(q, now + serverTimeoutMs());
                write(q, now);
            } else {
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "granted too late to be used"), null);
            }
            return;
        }
        l.ticket = q.ticket;
        leases.add(l);
        finish(q, null, l);
    }

    private boolean rUnlock(Req q, Wire.Reply r, double now) {
        Lease l = q.lease;
        boolean quiet = true;
        ArrayDeque<Ticket> dq = turns.get(q.name);
        if (dq != null && !dq.isEmpty() && (l == null || l.ticket != dq.peekFirst())) quiet = false;
        if (r.is("OK", "HELD") && q.lastHold && quiet && q.retries < Wire.REENTRY_MAX) {
            // holds we lost track of (a LOCK sent again after a reconnect was granted twice): give them back
            q.retries++;
            write(q, now);
        } else if (r.kind.equals("OK") && (r.word.equals("RELEASED") || r.word.equals("HELD"))) {
            finish(q, null, null);
        } else if (r.is("NO", "NOT_HOLDER")) {
            if (q.resent && q.lastHold) finish(q, null, null); // released before the drop
            else finish(q, DlockException.ofReply(r), null);
        } else {
            return false;
        }
        return true;
    }

    private boolean rRefresh(Req q, Wire.Reply r, double now) {
        Lease l = q.lease;
        if (q.op.equals("RENEW") || q.op.equals("RECLAIM")) l.refreshing = false;
        if (r.kind.equals("OK") && (r.word.equals("REFRESHED") || r.word.equals("RECLAIMED"))) {
            Long ms = r.uarg(r.word.equals("RECLAIMED") ? 2 : 1);
            if (ms == null || ms > q.ttl) {
                insane = true;
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may refresh so: " + r.text()), null);
                return true;
            }
            if (l.live()) {
                if (q.op.equals("REFRESH")) l.ttl = q.ttl;
                l.noteProof(r);
                confirmLease(l, q, q.sentAt, ms);
            }
            finish(q, null, ms);
            return true;
        }
        if (r.is("NO", "NOT_HOLDER") && q.op.equals("RENEW") && !l.proof.isEmpty() && l.live() && l.deadlineM > now) {
            // the server does not know the lease: if Redis forgot it, ask for it again with its proof
            q.op = "RECLAIM";
            l.refreshing = true;
            write(q, now);
            return true;
        }
        if (r.is("NO", "NOT_HOLDER")) {
            if (l.live()) lose(l, LostReason.REJECTED, "");
            finish(q, new LeaseLostException(r.word, r.text(), null, LostReason.REJECTED, null), null);
            return true;
        }
        if ((q.op.equals("RENEW") || q.op.equals("RECLAIM")) && l.live()) {
            // UNAVAILABLE and the like: try again soon; the guard says when it is too late
            l.renewAt = now + Math.max(l.ttl / 10, RENEW_RETRY_MIN_MS);
            risk(l);
        }
        return false;
    }

    private boolean rHello(Req q, Wire.Reply r, double now) {
        if (!r.kind.equals("OK")) {
            // refused (NO DENIED <id> need=key): on a reconnect, acting as another owner would be worse than not at all
            DlockException err = DlockException.ofReply(r);
            lastError = here() + ": " + r.text();
            if (!ready) {
                fatal = err;
                signalReady();
            }
            finish(q, err, null);
            dropWanted = true;
            return true;
        }
        int dt = Wire.atoi(r.kvs("default_ttl_ms"));
        if (dt > 0) defaultTTL = dt;
        String k = r.kvs("key");
        if (!k.isEmpty()) setKey(k);
        if (r.kv("owner") == null && r.kvs("auth").equals("required")) {
            DlockException err = DlockException.of(DlockException.Kind.DENIED, "the server requires AUTH: give a password, or a user and its secret");
            if (!ready) {
                fatal = err;
                signalReady();
            }
            lastError = err.getMessage();
            finish(q, err, null);
            dropWanted = true;
            return true;
        }
        backoff = BACKOFF_MIN_MS;
        failedI = -1;
        sessionOK = true;
        ready = true;
        signalReady();
        finish(q, null, null);
        session(now);
        return true;
    }

    private boolean rBody(Req q, Wire.Reply r) {
        if (!r.kind.equals("OK") || !r.word.equals(q.op)) return false;
        Long n = r.uarg(1);
        q.header = r;
        q.body = new ArrayList<>();
        if (n == null || n > Wire.BODY_LINES_MAX) {
            insane = true;
            finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "unexpected reply: " + r.text()), null);
            return true;
        }
        if (n == 0) {
            bodyDone(q);
        } else {
            bodyReq = q;
            bodyLeft = (int) (long) n;
            q.where = Where.SENT;
        }
        return true;
    }

    private void bodyDone(Req q) {
        Status st = Status.of(q.name, q.header);
        List<Holder> hs = new ArrayList<>(), ws = new ArrayList<>();
        for (String s : q.body) {
            Holder x = Holder.of(s);
            if (x == null) {
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "unexpected line: " + Wire.trunc(s)), null);
                return;
            }
            (x.waiter() ? ws : hs).add(x);
        }
        st = st.withFirst(hs.isEmpty() ? null : hs.get(0), st.holders() > 0);
        finish(q, null, new Holders(st, List.copyOf(hs), List.copyOf(ws), Wire.atoi(q.header.kvs("more"))));
    }

    // ---- output --------------------------------------------------------------------------

    private String format(Req q, double now) {
        seq++;
        q.seq = seq;
        q.tag = "j" + seq;
        switch (q.op) {
            case "AUTH":
                if (!cfg.user.isEmpty()) return new Wire.Line("AUTH", cfg.user, cfg.password).build(q.tag);
                return new Wire.Line("AUTH", cfg.password).build(q.tag);
            case "HELLO":
                return new Wire.Line("HELLO").kv("owner", owner).kv("key", key).build(q.tag);
            case "DESCRIBE":
                return describeLine().build(q.tag);
            case "LOCK": {
                Wire.Line l = new Wire.Line(q.wait == 0 ? "TRYLOCK" : "LOCK", q.name).kv("ttl", String.valueOf((long) q.ttl));
                if (q.wait < 0) {
                    l.kv("wait", "inf");
                } else if (q.wait > 0) {
                    if (q.waitEnd == NEVER) q.waitEnd = now + q.wait;
                    l.kv("wait", String.valueOf((long) Math.max(q.waitEnd - now, 1)));
                }
                if (q.shared) l.kv("mode", "shared");
                if (q.limit > 1) l.kv("limit", String.valueOf(q.limit));
                return l.build(q.tag);
            }
            case "CONFIRM": case "RENEW": case "REFRESH":
                return new Wire.Line("REFRESH", q.name, Wire.u64(q.token)).kv("ttl", String.valueOf((long) q.ttl)).build(q.tag);
            case "RECLAIM": {
                Lease l = q.lease;
                Wire.Line ln = new Wire.Line("RECLAIM", q.name, Wire.u64(q.token)).kv("proof", l.proof)
                        .kv("until", String.valueOf(l.until)).kv("ttl", String.valueOf((long) q.ttl));
                if (l.mode == Lease.Mode.SHARED) ln.kv("mode", "shared");
                if (l.limit > 1) ln.kv("limit", String.valueOf(l.limit));
                return ln.build(q.tag);
            }
            case "UNLOCK": case "CHECK":
                return new Wire.Line(q.op, q.name, Wire.u64(q.token)).build(q.tag);
            case "BREAK":
                return new Wire.Line("BREAK", q.name, Wire.u64(q.token)).kv("reason", q.reason).build(q.tag);
            case "CANCEL": case "STATUS": case "HOLDERS": case "WATCH": case "UNWATCH":
                return new Wire.Line(q.op, q.name).build(q.tag);
            case "REWATCH":
                return new Wire.Line("WATCH", q.name).build(q.tag);
            default:
                return new Wire.Line(q.op).build(q.tag); // PING
        }
    }

    private Wire.Line describeLine() {
        Wire.Line l = new Wire.Line("HELLO");
        String host = "";
        try {
            host = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
        } catch (IOException | RuntimeException e) {
            String h = System.getenv("HOSTNAME");
            if (h != null) host = h;
        }
        if (!host.isEmpty()) l.kv("host", Wire.descEncode(host, Wire.DESC_HOST_MAX));
        l.kv("pid", String.valueOf(ProcessHandle.current().pid()));
        String cmd = System.getProperty("sun.java.command", "");
        if (!cmd.isEmpty()) {
            cmd = cmd.split(" ", 2)[0];
            int i = cmd.lastIndexOf('/');
            if (i >= 0) cmd = cmd.substring(i + 1);
            l.kv("cmd", Wire.descEncode(cmd, Wire.DESC_CMD_MAX));
        }
        return l;
    }

    /** The server confirmed ms of lease for a request written at sentAt; a shortening REFRESH still in flight counts. */
    private void confirmLease(Lease l, Req q, double sentAt, double ms) {
        double d = sentAt + ms - slackMs(ms);
        for (Req o : fifo) {
            if (o == q || o.lease != l || o.ttl <= 0 || !(o.op.equals("REFRESH") || o.op.equals("RENEW") || o.op.equals("RECLAIM"))) continue;
            double e = o.sentAt + o.ttl - slackMs(o.ttl);
            if (e < d) d = e;
        }
        l.renewAt = sentAt + l.ttl / 3;
        l.atRiskM = false;
        l.setDeadline(d, false);
    }

    private void write(Req q, double now) {
        out.append(format(q, now));
        q.sentAt = now;
        q.where = Where.SENT;
        // A REFRESH that shortens the lease may take effect even if its reply never comes: count on it from now.
        Lease l = q.lease;
        if ((q.op.equals("REFRESH") || q.op.equals("RENEW")) && l != null && q.ttl > 0) {
            l.ttl = Math.min(l.ttl, q.ttl);
            double d = l.deadlineM;
            double e = now + q.ttl - slackMs(q.ttl);
            if (e < d) d = e;
            l.setDeadline(d, l.atRiskM);
        }
        fifo.addLast(q);
    }

    Req internal(String op, String name, long token, boolean lastHold) {
        Req q = new Req(op, name);
        q.token = token;
        q.internal = true;
        q.lastHold = lastHold;
        if (state == St.UP && (sessionOK || op.equals("AUTH") || op.equals("HELLO"))) {
            write(q, nowMs());
        } else if ((op.equals("UNLOCK") || state == St.UP) && state != St.DEAD) {
            q.where = Where.UNSENT;
            unsent.add(q);
        }
        return q;
    }

    private void renewLease(Lease l, double now) {
        Req q = new Req("RENEW", l.name);
        q.token = l.token;
        q.ttl = l.ttl;
        q.lease = l;
        q.internal = true;
        l.refreshing = true;
        write(q, now);
    }

    /** Releases a grant nobody wants: one hold of a lease we keep, or the whole lease (UNLOCK until RELEASED). */
    void cleanupGrant(String name, long token) {
        boolean keep = false;
        for (Lease l : leases) if (l.name.equals(name) && l.token == token && l.live()) keep = true;
        internal("UNLOCK", name, token, !keep);
    }

    // ---- requests ------------------------------------------------------------------------

    void submit(Req q, double now) {
        if (closing || state == St.DEAD) {
            finish(q, DlockException.of(DlockException.Kind.CLOSED, "the client is closed"), null);
        } else if (state == St.UP && sessionOK) {
            write(q, now);
        } else {
            q.where = Where.UNSENT;
            unsent.add(q);
        }
    }

    /** q fails with a timeout at d unless it ends before. */
    void setReqDeadline(Req q, double d) {
        if (q.timed) {
            timed.remove(q);
            q.timed = false;
        }
        q.deadline = d;
        if (!q.internal && !q.finished && d != NEVER) {
            timed.add(q);
            q.timed = true;
        }
    }

    /** The caller stops waiting for q (cancelled, interrupted, or no reply within the server timeout). */
    void abandon(Req q, DlockException err) {
        if (q.finished) return;
        switch (q.where) {
            case UNSENT:
                if (q.op.equals("UNLOCK") && q.lastHold) {
                    q.internal = true; // still release the lease once connected
                } else {
                    unsent.remove(q);
                    q.where = Where.NOWHERE;
                }
                break;
            case WAITING:
                waiting.remove(q.tag);
                q.where = Where.NOWHERE;
                // leave the queue; a grant that crosses the CANCEL comes as a "* GRANTED" nobody waits for, released
                if (state == St.UP) {
                    crossing++;
                    internal("CANCEL", q.name, 0, false);
                }
                break;
            case SENT:
                q.abandoned = true; // its reply will be cleaned up
                break;
            case TURN:
                if (q.ticket != null) q.ticket.waiter = null;
                break;
            default:
                break;
        }
        finish(q, err, null);
    }

    @SuppressWarnings("unchecked")
    void finish(Req q, DlockException err, Object result) {
        if (q.finished) return;
        q.where = Where.NOWHERE;
        q.finished = true;
        if (q.timed) {
            timed.remove(q);
            q.timed = false;
        }
        if (q.ticket != null && !(result instanceof Lease)) {
            giveTurn(q.ticket);
            q.ticket = null;
        }
        if (q.hook != null) {
            q.hook.run();
            q.hook = null;
        }
        CompletableFuture<Object> f = q.done;
        if (f == null) return;
        reqOf.remove(f);
        if (!q.exposed) {
            if (err != null) f.completeExceptionally(err);
            else f.complete(result);
            return;
        }
        // a future the caller sees: its dependents must not run on this thread
        callback(() -> {
            if (err != null) {
                f.completeExceptionally(err);
            } else if (!f.complete(result) && result instanceof Lease) {
                Lease l = (Lease) result; // cancelled meanwhile: give the grant back
                exec(() -> {
                    if (!l.released && !l.unlocking) {
                        l.unlocking = true;
                        l.setEnded();
                        released(l);
                        internal("UNLOCK", l.name, l.token, true);
                    }
                });
            }
        });
    }

    // ---- turns ---------------------------------------------------------------------------

    Ticket takeTurn(String name) {
        Ticket t = new Ticket(name);
        ArrayDeque<Ticket> dq = turns.computeIfAbsent(name, k -> new ArrayDeque<>());
        dq.addLast(t);
        if (dq.size() == 1) t.head = true;
        return t;
    }

    void giveTurn(Ticket t) {
        if (t == null) return;
        ArrayDeque<Ticket> dq = turns.get(t.name);
        if (dq == null) return;
        boolean wasHead = dq.peekFirst() == t;
        if (!dq.remove(t)) return;
        if (dq.isEmpty()) {
            turns.remove(t.name);
            return;
        }
        Ticket h = dq.peekFirst();
        if (wasHead && !h.head) {
            h.head = true;
            Req q = h.waiter;
            h.waiter = null;
            if (q != null && !q.finished) {
                double now = nowMs();
                if (q.wait > 0) {
                    q.wait = Math.max(q.start + q.wait - now, 1);
                }
                q.where = Where.NOWHERE;
                setReqDeadline(q, now + serverTimeoutMs());
                submit(q, now);
            }
        }
    }

    // ---- leases and timers ---------------------------------------------------------------

    void lose(Lease l, LostReason why, String brokenBy) {
        if (l.lostM != LostReason.NOT_LOST) return;
        l.lostM = why;
        giveTurn(l.ticket);
        l.ticket = null;
        String msg;
        switch (why) {
            case EXPIRED: msg = "the server ended it"; break;
            case REJECTED: msg = "the server does not know it (NOT_HOLDER)"; break;
            case UNCONFIRMED: msg = "it could not be confirmed before its local deadline"; break;
            default: msg = "the client was closed"; break;
        }
        if (brokenBy != null && !brokenBy.isEmpty()) msg = "broken by " + brokenBy;
        l.setLost(new LeaseLostException(null, null, l.name + " (token " + Wire.u64(l.token) + "): " + msg, why,
                brokenBy == null || brokenBy.isEmpty() ? null : brokenBy));
    }

    void risk(Lease l) {
        if (!l.atRiskM && l.live()) {
            l.atRiskM = true;
            l.setDeadline(l.deadlineM, true);
        }
    }

    void released(Lease l) {
        l.unlocking = false;
        l.released = true;
        leases.remove(l);
        giveTurn(l.ticket);
        l.ticket = null;
    }

    /** Renews what is due, declares lost what can no longer be confirmed in time, times requests out. */
    private double tick(double now) {
        double next = NEVER;
        if (state == St.UP && !sessionOK) {
            if (now >= helloBy) {
                lastError = here() + ": no answer to HELLO in time";
                helloBy = NEVER;
                dropWanted = true;
            } else {
                next = Math.min(next, helloBy);
            }
        }
        for (Lease l : new ArrayList<>(leases)) {
            if (!l.live()) continue;
            double lostAt = l.lostAtM;
            if (now >= lostAt) {
                lose(l, LostReason.UNCONFIRMED, "");
                continue;
            }
            next = Math.min(next, lostAt);
            if (!l.renew) continue;
            double overdue = l.renewAt + l.ttl / 6;
            if (!l.atRiskM) {
                if (now >= overdue) risk(l);
                else next = Math.min(next, overdue);
            }
            if (l.refreshing || state != St.UP || !sessionOK) continue;
            if (now < l.renewAt) {
                next = Math.min(next, l.renewAt);
                continue;
            }
            renewLease(l, now);
        }
        while (!timed.isEmpty() && timed.peek().deadline <= now) {
            Req q = timed.poll();
            q.timed = false;
            String why = "no reply from the server in time";
            if (q.where == Where.TURN) {
                why = q.name + " is held by this client";
            } else if (state != St.UP || !sessionOK) {
                why = "not connected" + (lastError.isEmpty() ? "" : ": " + lastError);
            }
            abandon(q, DlockException.of(DlockException.Kind.TIMEOUT, why));
        }
        if (!timed.isEmpty()) next = Math.min(next, timed.peek().deadline);
        return next;
    }

    // ---- watches -------------------------------------------------------------------------

    void unwatch(Watch x) {
        watches.remove(x);
        for (String p : x.patterns) {
            boolean still = false;
            for (Watch o : watches) still |= o.has(p);
            if (!still && state == St.UP && sessionOK) internal("UNWATCH", p, 0, false);
        }
        x.end();
    }

    private void rewatch() {
        Set<String> seen = new HashSet<>();
        for (Watch x : watches) {
            if (!x.active) continue;
            for (String p : x.patterns) if (seen.add(p)) internal("REWATCH", p, 0, false);
        }
    }

    private boolean rWatch(Req q, Wire.Reply r) {
        boolean ok = r.is("OK", "WATCHING");
        if (q.op.equals("WATCH")) {
            if (!ok) return false; // the error ends the call
            finish(q, null, null);
            return true;
        }
        for (Watch x : new ArrayList<>(watches)) {
            if (!x.active || !x.has(q.name)) continue;
            if (ok) {
                x.deliver(WatchEvent.of(WatchEvent.Kind.RESUMED, q.name, 0));
                continue;
            }
            x.deliver(WatchEvent.of(WatchEvent.Kind.REFUSED, q.name, 0));
            for (Iterator<String> it = x.patterns.iterator(); it.hasNext();) if (it.next().equals(q.name)) it.remove();
            if (x.patterns.isEmpty()) unwatch(x);
        }
        finish(q, null, null);
        return true;
    }
}
