package dlockd;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.DoubleFunction;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * The client's threads, after the Go client's client.go: the top of the protocol state machine
 * ({@code Core <- Protocol <- Engine}, one object; {@link Core} holds the requests, leases, turns and timers,
 * {@link Protocol} the connections, events and replies). One lock, {@link #mu}, guards all protocol state, as
 * libdlock's one mutex does: a caller runs its request under it on its own thread and writes it to the socket itself
 * (non-blocking: what the socket does not take is written by the reader thread when it can, or on TLS by the
 * connection's writer thread). Whoever reads the connection handles the lines it read under the lock, and the futures
 * of the calls are completed once it is let go: on a channel (TCP without TLS, unix) a caller waiting for its reply
 * reads the connection itself while no other thread does ({@link #readWhileWaiting}: one holder of {@link #rd} at a
 * time), so that no thread has to be woken for it; the connection's reader thread reads while no caller does (it
 * leaves the reading to callers while any waits, and until none came for LINGER_NS). On TLS the reader thread reads. The manager thread wakes for what is due -- renewals,
 * lost guards, reconnects, request timeouts -- and sleeps on a condition of the lock until then, woken early by
 * {@link #wakeAt}. Nothing blocks on I/O under the lock (a server that does not read is dropped).
 *
 * <p>Owns: the threads (manager, dialer, reader of each connection, writer of a TLS connection, callbacks) and what
 * they share: the socket being dialed, the current connection, readiness for build(); and the code that runs on them:
 * calls from other threads (exec, submitCall, abandon, await, close), the manager's loop and shutdown, dialing,
 * reading lines, writing, dropping a connection.
 *
 * <p>Threads: {@link #exec}, {@link #submitCall}, {@link #abandon(CompletableFuture, DlockException)},
 * {@link #await}, {@link #callback} and {@link #close} are called from any thread; the protocol code (Core, Protocol,
 * and here handle, flush, drop, shutdown) runs under {@link #mu} on whichever thread holds it.
 */
final class Engine extends Protocol {
    static final double CLOCK_STEP_MS = 250;
    static final int OUT_MAX = 4 << 20;
    private static final AtomicInteger IDS = new AtomicInteger();

    final int id = IDS.incrementAndGet();

    /** Guards the protocol state (every field of Core, Protocol, and those below marked so). */
    final ReentrantLock mu = new ReentrantLock();
    private final Condition wake = mu.newCondition();

    // guarded by mu
    Conn conn; // the current connection
    int gen; // the connection's generation: what a dialer or reader of an older one says is dropped
    private double sleepUntil = -NEVER; // when the manager looks next, while it sleeps
    private boolean wakeWanted, stopWanted;
    private List<Object[]> toComplete = new ArrayList<>(); // futures to complete once mu is let go
    private byte[] obuf = new byte[4096];

    // the reading of a channel connection (TCP without TLS, unix): by its reader thread, or by a caller waiting for
    // its reply, which then needs no other thread to wake it (one holder of rd at a time)
    static final long LINGER_NS = 5_000_000; // the reader thread leaves the reading to callers until none came for this long
    static final long CALLER_READ_MS = 100; // a caller reads this long at most before it looks again
    final ReentrantLock rd = new ReentrantLock();
    private volatile Conn.OfChannel rconn; // the current connection if it is a channel (set under mu)
    private final AtomicInteger callers = new AtomicInteger(); // callers in await()
    private volatile long lastCallerNs = System.nanoTime() - LINGER_NS;
    private volatile boolean bgSelecting; // the reader thread holds rd and waits in select
    private volatile Thread readingCaller; // the caller that holds rd and reads
    private volatile Thread bgParked; // the reader thread while it waits for the callers to be done (woken by the last)
    static final long CALLERS_LONG_NS = 50_000_000; // no caller came back for this long: they wait long
    private final java.util.concurrent.ConcurrentLinkedQueue<Thread> rdWaiters = new java.util.concurrent.ConcurrentLinkedQueue<>();

    // shared
    /** Where the leases go when their slot moves to another partition (the client's router); null: nowhere. */
    volatile Follower follower;
    final CompletableFuture<Void> readyF = new CompletableFuture<>();
    volatile boolean quit;
    private final Thread manager;
    private final List<Thread> threads = new ArrayList<>(); // every thread started (guarded by threadsMu)
    private final ReentrantLock threadsMu = new ReentrantLock();
    private Runnable dialing; // aborts the dial in progress (guarded by threadsMu), on shutdown
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

    // ---- the lock ------------------------------------------------------------------------

    /** Lets mu go, then completes the futures the work under it finished. */
    private void release() {
        List<Object[]> done = null;
        if (!toComplete.isEmpty() && mu.getHoldCount() == 1) {
            done = toComplete;
            toComplete = new ArrayList<>();
        }
        mu.unlock();
        if (done != null) {
            Thread me = Thread.currentThread();
            for (Object[] d : done) {
                @SuppressWarnings("unchecked")
                CompletableFuture<Object> f = (CompletableFuture<Object>) d[0];
                if (d[1] != null) f.completeExceptionally((DlockException) d[1]);
                else f.complete(d[2]);
                Thread t = (Thread) d[3];
                if (t != null && t != me) {
                    LockSupport.unpark(t);
                    if (t == readingCaller) {
                        Conn.OfChannel c = rconn;
                        if (c != null) c.wakeup(); // it waits in select: it has what it waited for
                    }
                }
            }
        }
    }

    @Override
    void complete(CompletableFuture<Object> f, DlockException err, Object result, Thread caller) {
        toComplete.add(new Object[] {f, err, result, caller});
    }

    @Override
    void wakeAt(double t) {
        if (t < sleepUntil) {
            sleepUntil = -NEVER;
            wakeWanted = true;
            wake.signal();
        }
    }

    /** After work under mu on any thread: write what was formatted, drop what must be, wake the manager as needed. */
    private void afterWork() {
        flush();
        if (takeDrop()) drop(nowMs());
        if (state == St.DOWN && !closing) wakeAt(reconnectAt);
        else if (state == St.UP && !sessionOK) wakeAt(helloBy);
        Req h = fifo.peekFirst();
        if (h != null && naddrs > 1) wakeAt(h.sentAt + unansweredMs());
        if (conn != null && conn.writingSince() != NEVER) wakeAt(conn.writingSince() + blockedMs());
    }

    /** A request written and not answered for this long drops the connection (a hung server, a black hole). */
    double unansweredMs() {
        return Math.max(serverTimeoutMs(), 1000);
    }

    /** A write blocked for this long drops the connection (at least a second: not a thread that waited for a CPU). */
    double blockedMs() {
        return Math.max(serverTimeoutMs(), 1000);
    }

    // ---- calls from other threads -------------------------------------------------------

    /**
     * Gives the client a new list of servers (a partition's daemons, as a newer map says them): the server in use keeps its
     * place if it is in the list; the next connect tries the list from there.
     */
    void setServers(List<Config.Address> a) {
        exec(() -> {
            String cur = here();
            cfg.addrs = List.copyOf(a);
            naddrs = cfg.addrs.size();
            addrI = 0;
            for (int i = 0; i < naddrs; i++) if (cfg.addrs.get(i).name.equals(cur)) addrI = i;
            hint = -1;
            failedI = -1;
            clusterRefused = 0;
        });
    }

    @Override
    boolean followLease(Lease l, MovedException m) {
        Follower fo = follower;
        if (fo == null) return false;
        l.moving = true;
        l.refreshing = true; // no renewal here while it moves; its lost guard still runs
        l.moves++;
        fo.async(() -> {
            boolean moved = false;
            try {
                moved = fo.follow(this, l, m);
            } catch (RuntimeException x) {
                // no partition's client to go to now (unreachable, or the client closing): tried again below
            }
            if (moved) return;
            exec(() -> {
                if (l.c != this || !l.moving) return;
                // renewed here again in a moment: a MOVED again has it follow again, until its deadline
                l.moving = false;
                l.refreshing = false;
                if (l.live()) {
                    l.renewAt = nowMs() + Math.max(l.ttl / 10, RENEW_RETRY_MIN_MS);
                    wakeAt(l.renewAt);
                    risk(l);
                }
            });
        });
        return true;
    }

    @Override
    boolean forwardUnlock(Req q, MovedException m) {
        Follower fo = follower;
        if (fo == null) return false;
        String name = q.name;
        long token = q.token;
        boolean last = q.lastHold;
        int moves = q.moves + 1;
        fo.async(() -> {
            Engine to = fo.route(this, name, m).engine();
            to.exec(() -> to.internal("UNLOCK", name, token, last).moves = moves);
        });
        return true;
    }

    /** Runs f under the client's lock, on this thread; false if the client is closed. */
    @Override
    boolean exec(Runnable f) {
        if (mu.isHeldByCurrentThread()) {
            f.run();
            return true;
        }
        mu.lock();
        try {
            if (quit) return false;
            try {
                f.run();
            } finally {
                afterWork();
            }
            return true;
        } finally {
            release();
        }
    }

    /**
     * Submits the request build makes (under the lock) with the server timeout as its deadline; the future completes
     * with its outcome.
     */
    CompletableFuture<Object> submitCall(DoubleFunction<Req> build, boolean exposed) {
        return submitCall(build, exposed, new CompletableFuture<>());
    }

    CompletableFuture<Object> submitCall(DoubleFunction<Req> build, boolean exposed, CompletableFuture<Object> f) {
        mu.lock();
        try {
            if (quit) {
                f.completeExceptionally(DlockException.of(DlockException.Kind.CLOSED, "the client is closed"));
                return f;
            }
            double now = nowMs();
            Req q;
            try {
                q = build.apply(now);
            } catch (RuntimeException e) {
                f.completeExceptionally(e);
                return f;
            }
            if (q == null) {
                complete(f, null, null, null);
                return f;
            }
            q.done = f;
            q.exposed = exposed;
            if (!exposed) q.caller = Thread.currentThread();
            reqOf.put(f, q);
            if (q.where == Where.TURN) {
                if (q.wait > 0) setReqDeadline(q, q.start + q.wait);
            } else {
                setReqDeadline(q, now + serverTimeoutMs());
                submit(q, now);
            }
            afterWork();
        } finally {
            release();
        }
        return f;
    }

    /** Gives up the call of future f (from any thread): what it still brings is cleaned up. */
    void abandon(CompletableFuture<Object> f, DlockException why) {
        exec(() -> {
            Req q = reqOf.get(f);
            if (q != null) abandon(q, why);
        });
    }

    /** Waits for a call's outcome; an interrupt gives the call up and throws DlockInterruptedException. */
    Object await(CompletableFuture<Object> f) {
        if (!f.isDone()) readWhileWaiting(f);
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

    /**
     * Waits for f by reading the channel connection itself while nobody else does, so that no thread has to be woken
     * for the reply; returns when f is done, the thread is interrupted, or there is no channel to read.
     */
    private void readWhileWaiting(CompletableFuture<Object> f) {
        Thread me = Thread.currentThread();
        callers.incrementAndGet();
        try {
            List<String> lines = null;
            while (!f.isDone() && !me.isInterrupted()) {
                Conn.OfChannel c = rconn;
                if (c == null) return;
                int g = c.gen;
                if (rd.tryLock()) {
                    try {
                        if (c != rconn || c.isClosed() || f.isDone()) continue;
                        readingCaller = me;
                        if (lines == null) lines = new ArrayList<>();
                        readStep(g, c, CALLER_READ_MS, lines);
                    } finally {
                        readingCaller = null;
                        rd.unlock();
                    }
                    continue;
                }
                if (bgSelecting) c.wakeup(); // the reader thread leaves the reading to us
                rdWaiters.add(me);
                if (rd.isLocked() && !f.isDone()) LockSupport.parkNanos(this, 10_000_000L);
                rdWaiters.remove(me);
            }
        } finally {
            lastCallerNs = System.nanoTime();
            if (callers.decrementAndGet() == 0) {
                Thread b = bgParked;
                if (b != null) LockSupport.unpark(b);
            }
            Thread t = rdWaiters.peek();
            if (t != null) LockSupport.unpark(t);
        }
    }

    /**
     * Reads connection g once (within timeoutMs; 0: until bytes come or the selector is woken) and handles its lines;
     * false once the connection is gone. Under rd.
     */
    private boolean readStep(int g, Conn.OfChannel c, long timeoutMs, List<String> lines) {
        Throwable err = null;
        try {
            int n = c.readSome(c.rbuf, timeoutMs);
            if (n < 0) err = new IOException("the server closed the connection");
            else if (n > 0) c.split(n, lines);
        } catch (Throwable t) {
            err = t;
        }
        if (!lines.isEmpty()) {
            boolean cur;
            try {
                cur = deliver(g, lines);
            } catch (Throwable t) {
                cur = false; // a bug: never a connection nobody reads, nor the caller's to see
                err = t;
            }
            lines.clear();
            if (!cur && err == null) return false;
        }
        if (err != null) {
            connError(g, err, "");
            return false;
        }
        return true;
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

    /** Runs user code off the client's lock, on the callback thread. */
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
        mu.lock();
        try {
            stopWanted = true;
            wakeWanted = true;
            wake.signal();
        } finally {
            release();
        }
    }

    // ---- the manager thread --------------------------------------------------------------

    private void run() {
        mu.lock();
        try {
            loop();
        } catch (Throwable t) {
            // a bug: the client cannot go on; fail what waits rather than leave it hanging
            lastError = "the client's manager thread failed: " + t;
            try {
                if (!closing) shutdown();
            } catch (Throwable ignored) {
                // what could be done was
            }
            quit = true;
            Thread th = Thread.currentThread();
            th.getUncaughtExceptionHandler().uncaughtException(th, t);
        } finally {
            quit = true;
            release();
        }
    }

    private void loop() {
        while (true) {
            if (stopWanted) {
                shutdown();
                return;
            }
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
            now = nowMs();
            if (conn != null && state == St.UP) {
                double ws = conn.writingSince();
                if (now - ws > blockedMs()) {
                    lastError = here() + ": the server does not read (a write blocked for the server timeout)";
                    drop(now);
                    continue;
                }
                if (ws != NEVER) next = Math.min(next, ws + blockedMs());
                Req h = fifo.peekFirst();
                if (h != null && sessionOK && naddrs > 1) {
                    if (now - h.sentAt > unansweredMs()) {
                        // a hung server, or a path that black-holes replies: connect again, to the next server (with
                        // one there is nowhere to go, and a drop would only lose the replies of what it may still
                        // carry out, as libdlock)
                        lastError = here() + ": no reply to " + (h.op.equals("CONFIRM") || h.op.equals("RENEW") ? "REFRESH" : h.op)
                                + " in " + Math.round(now - h.sentAt) + " ms";
                        failedI = addrI;
                        addrI = (addrI + 1) % naddrs;
                        drop(now);
                        continue;
                    }
                    next = Math.min(next, h.sentAt + unansweredMs());
                }
            }
            double d = next - now;
            if (!leases.isEmpty() && d > CLOCK_STEP_MS) d = CLOCK_STEP_MS;
            if (d > 3600e3) d = 3600e3;
            if (d < 1) d = 1;
            sleepUntil = now + d;
            if (!toComplete.isEmpty()) {
                // complete what was finished before sleeping, with the lock let go
                release();
                mu.lock();
            }
            if (!wakeWanted && !stopWanted) {
                double left = sleepUntil - nowMs();
                if (left > 0) {
                    try {
                        wake.awaitNanos((long) (left * 1e6));
                    } catch (InterruptedException e) {
                        stopWanted = true;
                    }
                }
            }
            wakeWanted = false;
            sleepUntil = -NEVER;
        }
    }

    private void handleDial(int g, Conn c, Exception err, boolean isFatal) {
        threadsMu.lock();
        dialing = null;
        threadsMu.unlock();
        double now = nowMs();
        if (g != gen || state != St.CONNECTING || quit) {
            if (c != null) {
                c.close();
                c.readerDone();
            }
            return;
        }
        if (err != null) {
            connectFailed(now, err.getMessage() == null ? err.toString() : err.getMessage(), isFatal);
            return;
        }
        conn = c;
        c.gen = g;
        if (c instanceof Conn.OfChannel) rconn = (Conn.OfChannel) c; // published with its gen
        newThread("dlockd-reader-" + id + "-" + g, () -> reader(g, c)).start();
        Conn.WriterLoop wl = c.writer();
        if (wl != null) {
            newThread("dlockd-writer-" + id + "-" + g, () -> {
                try {
                    wl.run();
                } catch (Throwable t) {
                    connError(g, t, "write: ");
                }
            }).start();
        }
        connected(now);
    }

    /** A reader, writer or dialer of connection g failed: drop it (if it is still the current one). */
    private void connError(int g, Throwable t, String what) {
        mu.lock();
        try {
            if (g != gen || state != St.UP) return;
            String m = t.getMessage() == null ? t.toString() : t.getMessage();
            if (sessionOK || lastError.isEmpty()) lastError = here() + ": " + what + m;
            drop(nowMs());
            afterWork();
        } finally {
            release();
        }
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
            if (a.path != null || cfg.tls == null) {
                c = dialChannel(a, timeoutMs);
                if (c == null) return; // closing
            } else {
                Socket raw = new Socket();
                if (!setDialing(() -> {
                    try {
                        raw.close();
                    } catch (IOException ignored) {
                        // closing
                    }
                })) {
                    raw.close();
                    return;
                }
                try {
                    long start = System.nanoTime();
                    raw.connect(new InetSocketAddress(a.host, a.port), (int) Math.min(timeoutMs, Integer.MAX_VALUE));
                    raw.setTcpNoDelay(true);
                    raw.setKeepAlive(true);
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
        } catch (Throwable t) {
            err = new IOException("connect: " + t, t); // out of memory, ...: a failed attempt, not a hung one
        }
        mu.lock();
        try {
            handleDial(g, c, err, fatalErr);
            afterWork();
        } finally {
            release();
        }
    }

    /** A TCP (without TLS) or unix socket channel, connected within the timeout; null when the client closes. */
    private Conn dialChannel(Config.Address a, long timeoutMs) throws IOException {
        SocketChannel ch = a.path != null ? SocketChannel.open(StandardProtocolFamily.UNIX) : SocketChannel.open();
        Selector sel = null;
        boolean ok = false;
        try {
            sel = Selector.open();
            ch.configureBlocking(false);
            final Selector fs = sel;
            if (!setDialing(() -> {
                try {
                    ch.close();
                } catch (IOException ignored) {
                    // closing
                }
                fs.wakeup();
            })) {
                return null;
            }
            if (a.path != null) {
                // a unix socket connects at once, or waits for room in the server's backlog: a blocking connect that a
                // timer closes at the connect timeout
                java.util.concurrent.atomic.AtomicBoolean settled = new java.util.concurrent.atomic.AtomicBoolean();
                CompletableFuture.delayedExecutor(timeoutMs, TimeUnit.MILLISECONDS).execute(() -> {
                    if (settled.compareAndSet(false, true)) {
                        try {
                            ch.close();
                        } catch (IOException ignored) {
                            // closing
                        }
                    }
                });
                ch.configureBlocking(true);
                try {
                    ch.connect(UnixDomainSocketAddress.of(a.path));
                } catch (IOException e) {
                    if (!settled.compareAndSet(false, true)) throw new SocketTimeoutException("connect timed out");
                    throw e;
                }
                if (!settled.compareAndSet(false, true)) throw new SocketTimeoutException("connect timed out");
                ch.configureBlocking(false);
            } else {
                SocketAddress sa = new InetSocketAddress(a.host, a.port);
                long end = System.nanoTime() + timeoutMs * 1_000_000L;
                if (!ch.connect(sa)) {
                    SelectionKey k = ch.register(sel, SelectionKey.OP_CONNECT);
                    while (!ch.finishConnect()) {
                        long left = (end - System.nanoTime()) / 1_000_000;
                        if (left <= 0) throw new SocketTimeoutException("connect timed out");
                        sel.select(left);
                        sel.selectedKeys().clear();
                        if (!ch.isOpen()) throw new ClosedChannelException();
                    }
                    k.interestOps(SelectionKey.OP_READ);
                }
            }
            if (a.path == null) {
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
            }
            Conn c = new Conn.OfChannel(ch, sel);
            ok = true;
            return c;
        } finally {
            if (!ok) {
                ch.close();
                if (sel != null) sel.close();
            }
        }
    }

    private static String[] supported(String[] all) {
        List<String> out = new ArrayList<>();
        for (String p : all) if (p.equals("TLSv1.2") || p.equals("TLSv1.3")) out.add(p);
        return out.toArray(new String[0]);
    }

    private static boolean isIpLiteral(String h) {
        return h.indexOf(':') >= 0 || h.matches("[0-9.]+");
    }

    private boolean setDialing(Runnable abort) {
        threadsMu.lock();
        try {
            if (quit || closing) return false;
            dialing = abort;
            return true;
        } finally {
            threadsMu.unlock();
        }
    }

    private void reader(int g, Conn c) {
        if (c instanceof Conn.OfChannel) {
            channelReader(g, (Conn.OfChannel) c);
            return;
        }
        Throwable err = null;
        try {
            List<String> lines = new ArrayList<>();
            while (err == null) {
                int n = c.read(c.rbuf);
                if (n < 0) {
                    err = new IOException("the server closed the connection");
                } else {
                    try {
                        c.split(n, lines);
                    } catch (IOException e) {
                        err = e;
                    }
                }
                if (!lines.isEmpty()) {
                    if (!deliver(g, lines)) return;
                    lines.clear();
                }
                if (quit) return;
            }
        } catch (Throwable t) {
            err = t; // I/O, or anything unexpected (out of memory): never a connection nobody reads
        } finally {
            c.readerDone();
        }
        connError(g, err, "");
    }

    /** The reader thread of a channel connection: it reads while no caller does (readWhileWaiting). */
    private void channelReader(int g, Conn.OfChannel c) {
        List<String> lines = new ArrayList<>();
        try {
            while (!quit && !c.isClosed()) {
                long idle = System.nanoTime() - lastCallerNs;
                int cs = callers.get();
                if (cs > 0 && idle > CALLERS_LONG_NS) {
                    // callers that wait long (a lock's wait) read meanwhile: sleep until the last is done
                    bgParked = Thread.currentThread();
                    if (callers.get() > 0) LockSupport.parkNanos(this, 1_000_000_000L);
                    bgParked = null;
                    continue;
                }
                if (cs > 0 || idle < LINGER_NS) {
                    // callers read for themselves: stay out of their way (what comes for nobody waits at most this)
                    LockSupport.parkNanos(this, cs > 0 ? LINGER_NS : LINGER_NS - idle);
                    continue;
                }
                rd.lock();
                try {
                    if (c.isClosed() || callers.get() > 0) continue;
                    bgSelecting = true;
                    if (!readStep(g, c, 0, lines)) return;
                } finally {
                    bgSelecting = false;
                    rd.unlock();
                    Thread t = rdWaiters.peek();
                    if (t != null) LockSupport.unpark(t);
                }
            }
        } catch (Throwable t) {
            connError(g, t, "");
        } finally {
            rd.lock();
            try {
                c.readerDone();
            } finally {
                rd.unlock();
            }
        }
    }

    /** Handles lines of connection g; false once it is not the current one. */
    private boolean deliver(int g, List<String> lines) {
        mu.lock();
        try {
            for (String s : lines) {
                if (g != gen || state != St.UP || dropWanted) break;
                double now = nowMs();
                if (!lineIn(s, now)) drop(now);
            }
            afterWork();
            return g == gen;
        } finally {
            release();
        }
    }

    /** Hands what was formatted to the connection; never blocks. */
    private void flush() {
        int n = out.length();
        if (n == 0) return;
        if (conn == null || state != St.UP) {
            out.setLength(0);
            return;
        }
        if (obuf.length < n) obuf = new byte[Math.max(obuf.length * 2, n)];
        for (int i = 0; i < n; i++) obuf[i] = (byte) out.charAt(i);
        out.setLength(0);
        int left;
        try {
            left = conn.send(obuf, 0, n);
        } catch (IOException | RuntimeException e) {
            if (sessionOK || lastError.isEmpty()) lastError = here() + ": write: " + e.getMessage();
            dropWanted = true;
            return;
        }
        if (left > OUT_MAX) {
            lastError = here() + ": the server does not read (" + left + " bytes unsent)";
            dropWanted = true;
        }
        if (obuf.length > 65536) obuf = new byte[4096];
    }

    private void closeConn() {
        rconn = null;
        if (conn != null) {
            conn.close();
            conn = null;
        }
        Thread b = bgParked;
        if (b != null) LockSupport.unpark(b); // its connection is gone: it ends
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
        gen++;
        threadsMu.lock();
        try {
            quit = true;
            if (dialing != null) dialing.run();
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
