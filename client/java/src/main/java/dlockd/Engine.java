package dlockd;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateException;
import java.util.ArrayList;
import java.util.List;
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
 * The client's threads, after the Go client's client.go: the top of the protocol state machine
 * ({@code Core <- Protocol <- Engine}, one object; {@link Core} holds the requests, leases, turns and timers,
 * {@link Protocol} the connections, events and replies). One manager thread owns all protocol state: callers hand it
 * closures ({@link #exec}, {@link #submitCall}), the reader thread of the current connection hands it lines, a dialer
 * thread hands it a new connection, and its timed poll wakes it for renewals, lost guards, reconnects and request
 * timeouts. It never blocks on I/O: what it sends goes to the connection's writer thread through a buffer (a server
 * that does not read is dropped).
 *
 * <p>Owns: the threads (manager, dialer, reader, writer of each connection, callbacks) and what they share: the
 * inbox, the socket being dialed, the current connection and its writer, readiness for build(); and the code that
 * runs on them: calls from other threads (post, exec, submitCall, abandon, await, close), the manager's loop and
 * shutdown, dialing, reading lines, writing, dropping a connection.
 *
 * <p>Threads: {@link #exec}, {@link #submitCall}, {@link #abandon(CompletableFuture, DlockException)},
 * {@link #await}, {@link #callback} and {@link #close} are called from any thread; run, loop, handle, startConnect,
 * flush, drop and shutdown run on the manager thread; dial on a dialer thread, reader on a reader thread, Writer on a
 * writer thread; these hand their results to the manager through the inbox ({@link #post}).
 */
final class Engine extends Protocol {
    static final double CLOCK_STEP_MS = 250;
    static final int OUT_MAX = 4 << 20;
    private static final AtomicInteger IDS = new AtomicInteger();

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

    final int id = IDS.incrementAndGet();

    // owned by the manager thread
    Conn conn; // the current connection
    Writer w; // its writer
    int gen; // the connection's generation: what a dialer or reader of an older one says is dropped

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

    Engine(Config cfg) {
        super(cfg);
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
    @Override
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

    /** Runs user code off the manager thread. */
    @Override
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

    @Override
    void signalReady() {
        readyF.complete(null);
    }
}
