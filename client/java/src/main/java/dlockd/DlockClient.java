package dlockd;

import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.ObjIntConsumer;
import java.util.function.Supplier;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;

/**
 * A client of dlockd: a connection to the active daemon of a list, with the threads that read it, renew the leases
 * and reconnect. Thread-safe.
 *
 * <pre>{@code
 * try (DlockClient client = DlockClient.builder().servers("10.0.0.1:7420,10.0.0.2:7420").owner("restock").build();
 *      Lease lease = client.lock("stock", Duration.ofSeconds(30), Duration.ofMinutes(1))) {
 *     lease.onLost(e -> worker.stop());
 *     restock(lease.token());
 * }
 * }</pre>
 *
 * <p><b>Fail-over.</b> Give every daemon of the cluster. When the connection drops, or the server says
 * {@code ERR NOT_ACTIVE} / {@code * BYE not-active active=...}, or a standby answers {@code HELLO}, the client
 * reconnects (to the active named, if it is in the list, else the next server, with a backoff of 50 ms doubling to
 * 1 s), says {@code AUTH} and {@code HELLO} with the same owner id and key, and once a server of its cluster answered
 * it confirms each lease still within its deadline ({@code REFRESH}, or {@code RECLAIM} with the lease's proof when the
 * server does not know it) and sends its waiting {@code LOCK}s again. A lease it cannot confirm before its local
 * deadline less the guard is lost. Leases shorter than about twice the take-over time cannot survive one.
 *
 * <p><b>Request ids.</b> Each acquire ({@code lock}, {@code tryLock}, {@code lockAsync}, and each multi-lock of
 * {@code lockAll}, {@code tryLockAll}, {@code lockAllAsync}) draws a random 64-bit
 * request id (never 0) and sends it ({@code req=}) on every write of its {@code LOCK} -- the first, and each one sent
 * again after a reconnect or a fail-over -- to a server whose {@code HELLO} on that connection said version 0.4.0 or
 * later. A {@code LOCK} whose reply a drop lost, sent again, then gets the grant it already had (the same token, no
 * hold added) or its place in the queue, rather than one more hold that this client would have to give back
 * ({@link HeldByOwnerException}) while the lost one kept the lock busy until its TTL.
 *
 * <p><b>Turns.</b> Within one client the holds of one name are taken one at a time: a second {@code lock} of a name
 * the client holds waits for its release (the server would grant it as a reentry of the same lease), and
 * {@code tryLock} fails with {@link BusyException}. A multi-lock ({@link #lockAll}) takes its turn on every name at
 * once; a name the client holds fails it at once ({@link HeldByOwnerException}: a multi-lock takes new leases only).
 *
 * <p><b>Partitions.</b> {@link Builder#build()} asks the first server for the partition map ({@code MAP}) once. An
 * unpartitioned service (epoch 0, or no map said) is used as above, over one connection. A partitioned one makes the
 * client a router over one ordinary client per partition, made on first use with the same settings, owner id and key:
 * a call about a name goes to the partition that serves the name's {@link #slot slot}, a multi-lock to its first
 * name's (its names must share a partition: one {@code {tag}}), and a lease stays bound to the connection that
 * granted it until its name's slot moves to another partition ({@code PARTITION MOVE}): the lease then follows it, same
 * token (see {@link Lease}), and a {@code LOCK} waiting for the name is sent on to it with its request id and what is
 * left of its wait. A {@code NO MOVED} is followed (the map read again when it is newer; a daemon behind the client's
 * map asked again after a pause), at most 3 times per call, then {@link MovedException}. A partitioned daemon that
 * has not read its map yet (just started) says no map either: so a {@code NO MOVED} answered to the unpartitioned
 * client has it ask {@code MAP} again, and a map then makes it a router from then on (the call sent on as that MOVED's
 * redirect, within the same 3; its leases follow their slots from then on too). Calls without a name ({@link #ping},
 * {@link #clusterId}, a watch of a prefix) go to the first connection and tell of its partition only. Closing the
 * client closes every partition's connection.
 *
 * <p><b>Threads.</b> One lock guards the protocol state; a caller writes its request itself (non-blocking) and, on a
 * connection without TLS, reads the reply itself while no other thread reads. A manager thread
 * ({@code dlockd-manager-N}) schedules renewals, lost guards, reconnects and timeouts; a reader thread serves each
 * connection while no caller reads (a writer thread too with TLS), a dialer thread each attempt to connect, and a
 * callback thread ({@code dlockd-callbacks-N}) runs listeners and completes the futures the client hands out.
 * {@link #close()} ends them all. No lock is held around blocking I/O.
 */
public final class DlockClient implements AutoCloseable {
    private final Engine e; // the first connection
    private volatile Router router; // a partitioned service: the legs; null: every call goes to e
    /**
     * The settings of the client build() made, while it is unpartitioned: a MOVED has it read MAP again and become a
     * router ({@link #promote}). Null for the client build() made a router at once, and for a router's first
     * connection and its legs (which never route: their router follows the MOVED).
     */
    private final Config base;
    private final Object routeMu = new Object(); // guards router's making and closed
    private boolean closed;

    private DlockClient(Engine e, Router router, Config base) {
        this.e = e;
        this.router = router;
        this.base = base;
        if (base != null && router == null) e.follower = new Promoting();
    }

    /**
     * The follower of an unpartitioned client's leases (see {@link Follower}): a lease's request answered
     * {@code NO MOVED} has the client ask {@code MAP} again ({@link #promote}); with a map, the client routes from then
     * on (its router becomes the follower) and the lease goes where the router sends it.
     */
    private final class Promoting implements Follower {
        @Override
        public boolean follow(Engine from, Lease l, MovedException m) {
            return promote(m).follow(from, l, m);
        }

        @Override
        public DlockClient route(Engine from, String name, MovedException m) {
            return promote(m).route(from, name, m);
        }

        @Override
        public boolean behind(Engine from, String name, MovedException m) {
            Router r = router;
            return r != null && r.behind(from, name, m);
        }

        @Override
        public void async(Runnable r) {
            Thread t = new Thread(() -> {
                try {
                    r.run();
                } catch (RuntimeException x) {
                    // the caller's to handle: it tries again
                }
            }, "dlockd-follow-" + e.id);
            t.setDaemon(true);
            t.start();
        }
    }

    /** @return a builder whose defaults come from the DLOCK_* environment */
    public static Builder builder() {
        return new Builder(System.getenv());
    }

    /**
     * Connects with the DLOCK_* environment.
     *
     * @return the client
     */
    public static DlockClient connect() {
        return builder().build();
    }

    /**
     * Connects to a list of servers, the rest from the DLOCK_* environment.
     *
     * @param servers "host:port,host:port" (at most 8; port 7420 when left out; '/path' a unix socket)
     * @return the client
     */
    public static DlockClient connect(String servers) {
        return builder().servers(servers).build();
    }

    /**
     * How to connect. Defaults come from the environment the {@code dlock} command reads: {@code DLOCK_SERVERS}, else
     * {@code DLOCK_SOCKET}, else {@code DLOCK_HOST}/{@code DLOCK_PORT}, else 127.0.0.1:7420; {@code DLOCK_SECRET} or
     * {@code DLOCK_PASSWORD}, {@code DLOCK_USER}, {@code DLOCK_OWNER} ({@code id} or {@code id=key}),
     * {@code DLOCK_CLUSTER}, {@code DLOCK_TLS} (on unless empty or 0), {@code DLOCK_TLS_CA}, {@code DLOCK_TLS_CERT},
     * {@code DLOCK_TLS_KEY}, {@code DLOCK_TLS_SERVER_NAME}. The builder's settings override them.
     */
    public static final class Builder {
        private final Map<String, String> env;
        private final List<Consumer<Config>> sets = new ArrayList<>();

        Builder(Map<String, String> env) {
            this.env = env;
        }

        /**
         * @param servers "host:port,host:port" (at most 8; an IPv6 host in brackets; port 7420 when left out; an entry
         *     starting with '/' or 'unix:' is a unix socket)
         * @return this builder
         */
        public Builder servers(String servers) {
            List<Config.Address> a = Config.parseServers(servers);
            sets.add(c -> c.addrs = a);
            return this;
        }

        /**
         * @param id the owner id said in HELLO ("id", or "id=key" as DLOCK_OWNER takes it); default: a random id for
         *     the client's life. Clients that say one id with its key are one owner to the server.
         * @return this builder
         */
        public Builder owner(String id) {
            sets.add(c -> c.setOwner(id));
            return this;
        }

        /**
         * @param key the secret that proves the owner id (16 to 64 letters, digits, - or _); default: the one the
         *     server makes, presented on every reconnect ({@link DlockClient#ownerKey()})
         * @return this builder
         */
        public Builder ownerKey(String key) {
            sets.add(c -> c.key = key);
            return this;
        }

        /**
         * Authenticates as a user of the server's users file ({@code AUTH <user> <secret>}).
         *
         * @param name the user
         * @param secret its secret
         * @return this builder
         */
        public Builder user(String name, String secret) {
            sets.add(c -> {
                c.user = name;
                c.password = secret;
            });
            return this;
        }

        /**
         * Authenticates with the server's one password ({@code AUTH <password>}).
         *
         * @param password the password
         * @return this builder
         */
        public Builder password(String password) {
            sets.add(c -> {
                c.user = "";
                c.password = password;
            });
            return this;
        }

        /**
         * Speaks TLS (1.2 or 1.3) on TCP, verifying the server's certificate and that it names the host connected to
         * (or {@link #tlsServerName}). Not used on a unix socket.
         *
         * @param factory the socket factory (e.g. {@code sslContext.getSocketFactory()}, or {@link Pem#socketFactory})
         * @return this builder
         */
        public Builder tls(SSLSocketFactory factory) {
            sets.add(c -> c.tls = factory);
            return this;
        }

        /**
         * @param ctx the SSL context to speak TLS with (see {@link #tls(SSLSocketFactory)})
         * @return this builder
         */
        public Builder tls(SSLContext ctx) {
            return tls(ctx.getSocketFactory());
        }

        /**
         * @param ctx the SSL context
         * @param serverName the name the server's certificate must carry (also sent as SNI)
         * @return this builder
         */
        public Builder tls(SSLContext ctx, String serverName) {
            return tls(ctx.getSocketFactory()).tlsServerName(serverName);
        }

        /**
         * @param serverName the name the server's certificate must carry, instead of each server's host
         * @return this builder
         */
        public Builder tlsServerName(String serverName) {
            sets.add(c -> c.tlsServerName = serverName == null ? "" : serverName);
            return this;
        }

        /**
         * @param d bounds {@link #build()} and each attempt to connect (2 s by default); while no server answered yet,
         *     each of n servers gets 1/n of it
         * @return this builder
         */
        public Builder connectTimeout(Duration d) {
            sets.add(c -> c.connectTimeout = d);
            return this;
        }

        /**
         * @param d how long a reply may take (5 s by default; a lock's wait in the queue is not counted): a later one
         *     fails the call with {@link LockTimeoutException}
         * @return this builder
         */
        public Builder serverTimeout(Duration d) {
            sets.add(c -> c.serverTimeout = d);
            return this;
        }

        /**
         * @param id the cluster id every server must name (32 hex digits, HELLO's cluster=); default: DLOCK_CLUSTER,
         *     else the first a server names
         * @return this builder
         */
        public Builder cluster(String id) {
            sets.add(c -> c.cluster = id);
            return this;
        }

        /**
         * @param on whether to say who the client is (host name, pid, main class), which the server shows with its
         *     leases (on by default)
         * @return this builder
         */
        public Builder describe(boolean on) {
            sets.add(c -> c.describe = on);
            return this;
        }

        /**
         * @param d the lost guard: a lease not confirmed until its local deadline less d is lost; default
         *     max(TTL/10, 20 ms)
         * @return this builder
         */
        public Builder lostGuard(Duration d) {
            sets.add(c -> c.lostGuard = d);
            return this;
        }

        /**
         * @param listener called on a client thread for every lease of the client that is lost (after the lease's own
         *     listeners)
         * @return this builder
         */
        public Builder onLost(BiConsumer<Lease, LeaseLostException> listener) {
            sets.add(c -> c.onLost = listener);
            return this;
        }

        /**
         * @param listener called on a client thread each time a lease of the client becomes at risk
         * @return this builder
         */
        public Builder onAtRisk(Consumer<Lease> listener) {
            sets.add(c -> c.onAtRisk = listener);
            return this;
        }

        /**
         * @param listener called on a client thread each time the server says that others wait for a lease of the
         *     client taken with {@link LockOptions#notifyWaiters()}, with the lease and how many requests wait (after
         *     the lease's own {@link Lease#onContended} listeners). It may come before the lease is handed out: a
         *     waiter's grant is told of the requests behind it at once.
         * @return this builder
         */
        public Builder onContended(ObjIntConsumer<Lease> listener) {
            sets.add(c -> c.onContended = listener);
            return this;
        }

        /**
         * Connects: returns once a server of the list that is the active daemon of the client's cluster answered
         * {@code HELLO}.
         *
         * @return the client
         * @throws UnavailableException when no server could be used within the connect timeout (naming why)
         * @throws DeniedException at once when AUTH or HELLO is refused (a wrong secret, an owner id bound to another
         *     key)
         * @throws ClusterMismatchException when every server names another cluster
         * @throws IllegalArgumentException for a bad setting
         */
        public DlockClient build() {
            Config cfg = Config.fromEnv(env);
            for (Consumer<Config> s : sets) s.accept(cfg);
            cfg.validate();
            return discover(cfg, open(cfg));
        }
    }

    /**
     * An ordinary client of cfg's servers (a single cluster: the first connection, or a partition's leg), connected.
     *
     * @return the client
     * @throws DlockException as {@link Builder#build()}: unavailable, denied, another cluster
     */
    static DlockClient open(Config cfg) {
        Engine e = new Engine(cfg);
        boolean interrupted = false;
        long end = System.nanoTime() + cfg.connectTimeout.toNanos();
        while (true) {
            try {
                e.readyF.get(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS);
                break;
            } catch (InterruptedException x) {
                interrupted = true;
            } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException x) {
                break;
            }
        }
        boolean[] ok = new boolean[1];
        DlockException[] fatal = new DlockException[1];
        String[] why = new String[1];
        e.exec(() -> {
            ok[0] = e.ready;
            fatal[0] = e.fatal;
            why[0] = e.lastError;
        });
        if (interrupted) Thread.currentThread().interrupt();
        if (!ok[0]) {
            e.close();
            if (fatal[0] != null) throw fatal[0];
            throw DlockException.of(DlockException.Kind.UNAVAILABLE,
                    "cannot connect to dlockd" + (why[0] == null || why[0].isEmpty() ? "" : ": " + why[0]));
        }
        return new DlockClient(e, null, null);
    }

    /** How often build() asks MAP again when the connection closed before the answer. */
    static final int MAP_TRIES = 3;

    /**
     * Asks the first connection's daemon for the partition map ({@code MAP}), once: a map of epoch above 0 makes c a
     * router over one client per partition. Epoch 0 -- and a daemon that says no map at all (one before partitions
     * answers {@code ERR UNKNOWN_COMMAND}; or an error, or no answer within the server timeout) -- leaves c as it is,
     * as before partitions: one connection that serves every name, until a call about a name is answered
     * {@code NO MOVED} ({@link #promote}). A connection lost before the answer asks the next.
     */
    private static DlockClient discover(Config cfg, DlockClient c) {
        PartitionMap m = null;
        for (int i = 0; i < MAP_TRIES && m == null; i++) {
            try {
                m = c.readMap();
            } catch (ConnectionLostException x) {
                // the session ended under it: ask the next
            } catch (DlockException x) {
                break; // no map said: not partitioned
            }
        }
        if (m == null || m.epoch == 0) return new DlockClient(c.e, null, cfg);
        return new DlockClient(c.e, new Router(cfg, c, m), null);
    }

    /**
     * A call of this unpartitioned client was answered m ({@code NO MOVED}): the daemon its first {@code MAP} found
     * unpartitioned is a partitioned one that had not read its map yet (it says {@code OK MAP 0 0} then), or that
     * {@code MAP} was not answered. Asks {@code MAP} again: a map (epoch above 0) makes the client a router from now
     * on, which the call is then sent on through ({@link Router#callAfter}).
     *
     * @return the router
     * @throws MovedException m, when the client cannot route: a router's leg or first connection (the router follows
     *     the MOVED), or the daemon still says no map (or does not answer)
     */
    Router promote(MovedException m) {
        Router r = router;
        if (r != null) return r; // made by another call meanwhile
        if (base == null) throw m;
        PartitionMap pm;
        try {
            pm = readMap();
        } catch (DlockException x) {
            throw m;
        }
        r = routeBy(pm);
        if (r == null) throw m;
        return r;
    }

    /** As {@link #promote}, without blocking: the router, or null when the client cannot route. */
    private CompletableFuture<Router> promoteAsync() {
        Router r = router;
        if (r != null || base == null) return CompletableFuture.completedFuture(r);
        CompletableFuture<Object> f = e.submitCall(now -> new Engine.Req("MAP", ""), true, new CompletableFuture<>());
        return f.handle((v, x) -> x == null && v instanceof PartitionMap ? routeBy((PartitionMap) v) : router);
    }

    /** The router of map m (made now, over this client's connection, unless there is one): null for no map. */
    private Router routeBy(PartitionMap m) {
        if (m == null || m.epoch == 0) return null;
        synchronized (routeMu) {
            if (router == null && !closed) router = new Router(base, new DlockClient(e, null, null), m);
            return router;
        }
    }

    /**
     * The acquire future of an unpartitioned client made by build(): a MOVED answer has the client ask MAP again
     * ({@link #promoteAsync}) and, when it routes now, the acquire sent on through the router into f; else f fails
     * with the MOVED.
     */
    private <T> void followMoved(AcquireFuture<T> f, String name, Function<DlockClient, CompletableFuture<T>> op) {
        if (base == null) return;
        f.onMoved = m -> promoteAsync().whenComplete((r, x) -> {
            if (r == null) f.completeExceptionally(m);
            else r.callAsyncAfter(f, name, m, op);
        });
    }

    /** The partition map as the first connection's daemon (or this leg's) knows it now ({@code MAP}). */
    PartitionMap readMap() {
        return (PartitionMap) e.awaitUninterruptibly(e.submitCall(now -> new Engine.Req("MAP", ""), false, new CompletableFuture<>()));
    }

    /** @return the epoch of the partition map the client routes by; 0: the service is not partitioned */
    long mapEpoch() {
        Router r = router;
        return r == null ? 0 : r.map().epoch;
    }

    Router router() {
        return router;
    }

    /**
     * The hash slot of a lock name, which decides the partition that serves it on a partitioned service: Redis
     * Cluster's ({@code CRC16/XMODEM} of the name modulo 16384), or of its tag when it has one -- what is between the
     * first '{' and the first '}' after it, if anything is. So {@code {order:42}:pay} and {@code {order:42}:ship} are
     * served by one partition, and may be taken by one {@link #lockAll}.
     *
     * @param name a lock name
     * @return its slot, 0 to 16383
     */
    public static int slot(String name) {
        Wire.checkName(name, "lock name");
        return Slots.of(name);
    }

    // ---- locking ------------------------------------------------------------------------

    /**
     * Acquires name exclusively, waiting in the server's queue.
     *
     * @param name the lock (1-255 printable ASCII characters, no space or '=')
     * @param ttl the lease's TTL (null: the server's default, 30 s)
     * @param wait the longest wait (null: until granted; zero: try once)
     * @return the lease, renewed in the background
     * @throws LockTimeoutException when the wait ran out
     * @throws BusyException with a zero wait when the lock is busy
     * @throws DlockInterruptedException when the thread was interrupted (the wait is cancelled at the server)
     */
    public Lease lock(String name, Duration ttl, Duration wait) {
        LockOptions o = LockOptions.DEFAULT.waitFor(wait);
        if (ttl != null) o = o.withTtl(ttl);
        return lock(name, o);
    }

    /**
     * Acquires name exclusively with the server's TTL, waiting until granted.
     *
     * @param name the lock
     * @return the lease
     */
    public Lease lock(String name) {
        return lock(name, LockOptions.DEFAULT);
    }

    /**
     * Acquires name as the options say, waiting in the server's queue until granted, until the options' wait runs out
     * ({@link LockTimeoutException}), or until the thread is interrupted ({@link DlockInterruptedException}: the wait
     * is cancelled at the server, and a grant that crossed the cancel is given back).
     *
     * @param name the lock
     * @param opts TTL, wait, mode, renewal, news of waiters ({@link LockOptions#notifyWaiters()}), the lease's value
     *     ({@link LockOptions#value(String)})
     * @return the lease
     * @throws BusyException with a zero wait when the lock is busy
     * @throws LockTimeoutException when the wait ran out, or no reply came within the server timeout
     * @throws DlockException of the other kinds as the server refused: {@link DeadlockException},
     *     {@link UpgradeDeadlockException}, {@link LimitMismatchException}, {@link HeldByOwnerException},
     *     {@link DeniedException}, {@link UnavailableException}, {@link LimitException}
     */
    public Lease lock(String name, LockOptions opts) {
        return lock(name, opts, new Acq(), true);
    }

    /** As {@link #lock(String, LockOptions)}, but an interrupt does not stop the wait (the flag is kept). */
    Lease lockUninterruptibly(String name, LockOptions opts) {
        return lock(name, opts, new Acq(), false);
    }

    /** The acquire a of name, on this client's connection or sent on by the router (a MOVED sends it on, as it is). */
    private Lease lock(String name, LockOptions opts, Acq a, boolean interruptible) {
        Router r = router;
        if (r == null) {
            try {
                CompletableFuture<Object> f = acquire(name, opts, false, new CompletableFuture<>(), a);
                return (Lease) (interruptible ? e.await(f) : e.awaitUninterruptibly(f));
            } catch (MovedException m) {
                return promote(m).callAfter(name, m, c -> c.lock(name, opts, a, interruptible));
            }
        }
        Wire.checkName(name, "lock name");
        return r.call(name, c -> c.lock(name, opts, a, interruptible));
    }

    /**
     * Acquires name now if it can be, else throws {@link BusyException} (whose {@link BusyException#holder()} names
     * the holder when the server says).
     *
     * @param name the lock
     * @param ttl the lease's TTL (null: the server's default)
     * @return the lease
     */
    public Lease tryLock(String name, Duration ttl) {
        LockOptions o = LockOptions.DEFAULT;
        if (ttl != null) o = o.withTtl(ttl);
        return tryLock(name, o);
    }

    /**
     * As {@link #tryLock(String, Duration)}, with the options' TTL, mode and renewal (their wait is ignored).
     *
     * @param name the lock
     * @param opts the options
     * @return the lease
     * @throws BusyException when the lock is busy
     */
    public Lease tryLock(String name, LockOptions opts) {
        return lock(name, opts.waitFor(Duration.ZERO));
    }

    /**
     * Acquires name without blocking the caller. Cancelling the future (before it completes) gives the request up: the
     * wait is cancelled at the server and a grant that crossed the cancel is given back. The future completes on a
     * client thread; cancelling a dependent stage does not cancel the request.
     *
     * @param name the lock
     * @param opts TTL, wait, mode, renewal, news of waiters ({@link LockOptions#notifyWaiters()}), the lease's value
     *     ({@link LockOptions#value(String)})
     * @return the lease, to come; failed with the exceptions of {@link #lock(String, LockOptions)}
     */
    public CompletableFuture<Lease> lockAsync(String name, LockOptions opts) {
        return lockAsync(name, opts, new Acq());
    }

    private CompletableFuture<Lease> lockAsync(String name, LockOptions opts, Acq a) {
        Router r = router;
        if (r != null) {
            Wire.checkName(name, "lock name");
            return r.callAsync(name, c -> c.lockAsync(name, opts, a));
        }
        AcquireFuture<Lease> f = new AcquireFuture<>(e);
        followMoved(f, name, c -> c.lockAsync(name, opts, a));
        acquire(name, opts, true, f, a);
        return f;
    }

    /**
     * A future whose cancel gives the lock request up (and, once a MOVED sent it on through the router the client
     * became, the routed attempt under way: {@link Router.Routed}).
     */
    private static final class AcquireFuture<T> extends Router.Routed<T> {
        private final Engine e;
        /** What a MOVED answer does instead of failing the future (once), when the client may become a router. */
        volatile Consumer<MovedException> onMoved;

        AcquireFuture(Engine e) {
            this.e = e;
        }

        @Override
        public boolean completeExceptionally(Throwable x) {
            Consumer<MovedException> m = onMoved;
            if (m != null && x instanceof MovedException && !isDone()) {
                synchronized (this) {
                    m = onMoved;
                    onMoved = null;
                }
                if (m != null) {
                    m.accept((MovedException) x);
                    return false; // not yet: the call is sent on
                }
            }
            return super.completeExceptionally(x);
        }

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            boolean r = super.cancel(mayInterruptIfRunning);
            if (r) e.abandon(objectFuture(this), DlockException.of(DlockException.Kind.INTERRUPTED, "cancelled"));
            return r;
        }

        @Override
        public <U> CompletableFuture<U> newIncompleteFuture() {
            return new CompletableFuture<>();
        }
    }

    @SuppressWarnings("unchecked")
    static CompletableFuture<Object> objectFuture(CompletableFuture<?> f) {
        return (CompletableFuture<Object>) f;
    }

    private static final SecureRandom IDS = new SecureRandom();

    /** An acquire's request id: 64 random bits, never 0 (LOCK req=, sent unsigned; the same on every write). */
    static long requestId() {
        long x;
        do {
            x = IDS.nextLong();
        } while (x == 0);
        return x;
    }

    /**
     * One acquire as the caller asked it: when (its wait counts from then) and its request id. A MOVED sends it on to
     * another partition as it is -- the same id, what is left of the wait -- also when it came after the LOCK waited
     * (the name's slot moved meanwhile: the receiver keeps its place for the same owner).
     */
    static final class Acq {
        final double start = Engine.nowMs();
        final long reqId = requestId();
    }

    private CompletableFuture<Object> acquire(String name, LockOptions o, boolean exposed, CompletableFuture<?> f, Acq a) {
        Wire.checkName(name, "lock name");
        return acquire(List.of(name), false, o, exposed, f, a);
    }

    /**
     * The acquire of names (one, or a multi-lock's in byte order, all: handed out as {@link Leases}), after its turn on
     * each name within this client.
     */
    private CompletableFuture<Object> acquire(List<String> names, boolean all, LockOptions o, boolean exposed,
            CompletableFuture<?> f, Acq a) {
        final String name = names.get(0);
        if (o == null) o = LockOptions.DEFAULT;
        final LockOptions lc = o;
        final double start = a.start;
        final double waitMs = lc.wait == null ? -1 : lc.wait.toNanos() / 1e6;
        final long reqId = a.reqId;
        final String value = Wire.descEncode(lc.value, Wire.VALUE_MAX);
        CompletableFuture<Object> fo = objectFuture(f);
        return e.submitCall(now -> {
            if (all) {
                for (String n : names) {
                    if (e.holdsLive(n)) {
                        throw new HeldByOwnerException(n + " is held by this client: a multi-lock takes new leases only");
                    }
                }
            }
            Engine.Req q = new Engine.Req("LOCK", name);
            q.reqId = reqId;
            q.notify = lc.notifyWaiters;
            q.value = value;
            q.start = start;
            q.wait = waitMs;
            q.shared = lc.shared;
            q.limit = lc.limit;
            q.renew = lc.renew;
            q.ttl = lc.ttl == null ? e.defaultTTL : Wire.durMs(lc.ttl);
            List<Engine.Ticket> ts = new ArrayList<>();
            Engine.Ticket busy = null;
            for (String n : names) {
                Engine.Ticket t = e.takeTurn(n);
                ts.add(t);
                if (!t.head && busy == null) busy = t;
            }
            if (all) {
                q.names = names;
                q.tickets = ts;
            } else {
                q.ticket = ts.get(0);
            }
            if (busy != null) {
                if (waitMs == 0) {
                    q.ticket = null;
                    q.tickets = null;
                    for (Engine.Ticket t : ts) e.giveTurn(t);
                    throw new BusyException(null, null, busy.name + " is held by this client", null);
                }
                q.where = Engine.Where.TURN;
                for (Engine.Ticket t : ts) if (!t.head) t.waiter = q;
            } else {
                if (waitMs > 0) q.wait = Math.max(start + waitMs - now, 1);
                q.start = now;
            }
            return q;
        }, exposed, fo);
    }

    // ---- several locks at once ------------------------------------------------------------

    /** The most bytes the options of a multi-lock's line take: ttl= and wait= (13 digits), req= (20), id=j (10). */
    static final int MULTI_OPTS_MAX = (" ttl=".length() + 13) + (" wait=".length() + 13) + (" req=".length() + 20)
            + (" id=j".length() + 10);

    /**
     * A multi-lock's names, checked, in byte order: 1 to 64 distinct lock names whose request line fits the
     * protocol's 1024 bytes.
     */
    static List<String> multiNames(Collection<String> names) {
        if (names == null || names.isEmpty()) throw new IllegalArgumentException("lockAll: no lock name");
        if (names.size() > Wire.MULTI_MAX) {
            throw new IllegalArgumentException("lockAll: " + names.size() + " names, at most " + Wire.MULTI_MAX);
        }
        List<String> s = new ArrayList<>(names);
        long len = "TRYLOCK".length() + MULTI_OPTS_MAX;
        for (String n : s) {
            Wire.checkName(n, "lock name");
            len += 1 + n.length();
        }
        s.sort(null); // byte order: the names are ASCII, whose String order is memcmp's (shorter first on a tie)
        for (int i = 1; i < s.size(); i++) {
            if (s.get(i).equals(s.get(i - 1))) throw new IllegalArgumentException("lockAll: '" + s.get(i) + "' named twice");
        }
        if (len > Wire.REQUEST_LINE_MAX) {
            throw new IllegalArgumentException("lockAll: the names take " + len + " bytes of a request line with its options, at most "
                    + Wire.REQUEST_LINE_MAX);
        }
        return List.copyOf(s);
    }

    private CompletableFuture<Object> acquireAll(Collection<String> names, LockOptions o, boolean exposed, CompletableFuture<?> f,
            Acq a) {
        return acquire(checkAll(names, o), true, o, exposed, f, a);
    }

    /** A multi-lock's names, checked, in byte order, and its options checked. */
    private static List<String> checkAll(Collection<String> names, LockOptions o) {
        List<String> ns = multiNames(names);
        if (o != null && (o.shared || o.limit > 1 || o.notifyWaiters || !o.value.isEmpty())) {
            throw new IllegalArgumentException("lockAll takes the options' TTL, wait and renewal only (every lock is taken"
                    + " exclusive, without notifyWaiters or a value): " + o);
        }
        return ns;
    }

    /**
     * Acquires several locks at once, all or none ({@code LOCK a b c ...}): every lock exclusive, each a lease of its
     * own. The server takes the names in byte order, each in its own FIFO queue, holding those it has while it waits
     * for the next (so two multi-locks never wait for each other in a cycle; against single locks each wait goes
     * through the server's deadlock check), and answers once it has them all, or has given back those it took. While
     * it waits, the locks taken are held by this client's owner (a {@link #status} shows them held).
     *
     * <p>The leases are ordinary leases: renewed in the background (unless {@link LockOptions#noRenew()}), lost,
     * refreshed, checked and unlocked one by one; {@link Leases#unlockAll()} or {@link Leases#close()} gives them all
     * back. The acquire draws one request id for the multi-lock, as {@link #lock(String, LockOptions)} does, and a
     * multi-lock sent again after a drop or a fail-over gets back the leases it was granted, or its wait. One name is
     * an ordinary lock, its lease handed out as {@code Leases} of one.
     *
     * <p>A name this client holds a lease of fails the call at once with {@link HeldByOwnerException}, as the server
     * refuses a name the owner holds ({@code NO ALREADY_HELD}, e.g. held by another client of the same owner): a
     * multi-lock takes new leases only, never a reentry. A name another call of this client is acquiring or releasing
     * waits for its turn, as {@code lock} does. The server runs one multi-lock at a time per connection: another
     * {@code lockAll} of this client while one waits fails with {@link LimitException}.
     *
     * @param names 1 to 64 distinct lock names, in any order (their line at most 1024 bytes)
     * @param opts the TTL of every lease, the wait (null: until granted; zero: try once), renewal; a shared mode, a
     *     limit, {@link LockOptions#notifyWaiters()} or a value are refused ({@link IllegalArgumentException})
     * @return the leases, in byte order of the names
     * @throws BusyException with a zero wait when a lock is busy (nothing is held)
     * @throws LockTimeoutException when the wait ran out (nothing is held), or no reply came within the server timeout
     * @throws DeadlockException when waiting would close a cycle of owners waiting for each other (at once, or while
     *     it waited: {@code * FAILED <first> DEADLOCK ...})
     * @throws HeldByOwnerException when the owner holds one of the names already
     * @throws DlockInterruptedException when the thread was interrupted: the wait is cancelled at the server
     *     ({@code CANCEL <first>}), and what it took is given back
     * @throws DlockException of the other kinds as the server refused or failed it, at once or while it waited
     *     ({@link UnavailableException}, {@link LimitMismatchException}, {@link LimitException},
     *     {@link DeniedException}; code {@code "EXPIRED"} when a lock it had taken was broken meanwhile)
     */
    public Leases lockAll(Collection<String> names, LockOptions opts) {
        return lockAll(names, opts, new Acq());
    }

    private Leases lockAll(Collection<String> names, LockOptions opts, Acq a) {
        Router r = router;
        if (r == null) {
            try {
                return (Leases) e.await(acquireAll(names, opts, false, new CompletableFuture<>(), a));
            } catch (MovedException m) {
                r = promote(m);
                return r.callAfter(checkAll(names, opts).get(0), m, c -> c.lockAll(names, opts, a));
            }
        }
        String first = checkAll(names, opts).get(0); // the server's name of it: its partition is every name's
        return r.call(first, c -> c.lockAll(names, opts, a));
    }

    /**
     * As {@link #lockAll(Collection, LockOptions)} with a TTL and a wait.
     *
     * @param names 1 to 64 distinct lock names
     * @param ttl the TTL of every lease (null: the server's default, 30 s)
     * @param wait the longest wait (null: until granted; zero: try once)
     * @return the leases, in byte order of the names
     */
    public Leases lockAll(Collection<String> names, Duration ttl, Duration wait) {
        LockOptions o = LockOptions.DEFAULT.waitFor(wait);
        if (ttl != null) o = o.withTtl(ttl);
        return lockAll(names, o);
    }

    /**
     * Acquires every name now if all can be had ({@code TRYLOCK a b ...}), else throws {@link BusyException} (naming
     * the first busy lock's holder when the server says); nothing is held then.
     *
     * @param names 1 to 64 distinct lock names
     * @param opts the options (their wait is ignored)
     * @return the leases, in byte order of the names
     */
    public Leases tryLockAll(Collection<String> names, LockOptions opts) {
        return lockAll(names, (opts == null ? LockOptions.DEFAULT : opts).waitFor(Duration.ZERO));
    }

    /**
     * As {@link #lockAll(Collection, LockOptions)} without blocking the caller. Cancelling the future (before it
     * completes) gives the request up: the wait is cancelled at the server ({@code CANCEL <first>}, which gives back
     * what it took), and grants that crossed the cancel are given back. The future completes on a client thread.
     *
     * @param names 1 to 64 distinct lock names
     * @param opts TTL, wait, renewal
     * @return the leases, to come; failed with the exceptions of {@link #lockAll(Collection, LockOptions)}
     */
    public CompletableFuture<Leases> lockAllAsync(Collection<String> names, LockOptions opts) {
        return lockAllAsync(names, opts, new Acq());
    }

    private CompletableFuture<Leases> lockAllAsync(Collection<String> names, LockOptions opts, Acq a) {
        Router r = router;
        if (r != null) {
            String first = checkAll(names, opts).get(0);
            return r.callAsync(first, c -> c.lockAllAsync(names, opts, a));
        }
        AcquireFuture<Leases> f = new AcquireFuture<>(e);
        if (base != null) {
            List<String> ns;
            try {
                ns = checkAll(names, opts);
            } catch (RuntimeException x) {
                ns = null; // acquireAll fails f with it
            }
            if (ns != null) followMoved(f, ns.get(0), c -> c.lockAllAsync(names, opts, a));
        }
        acquireAll(names, opts, true, f, a);
        return f;
    }

    // ---- looking ------------------------------------------------------------------------

    /**
     * @param name the lock
     * @return the lock as the server sees it (its first holder)
     */
    public Status status(String name) {
        Wire.checkName(name, "lock name");
        return byName(name, () -> (Status) e.await(e.submitCall(now -> new Engine.Req("STATUS", name), false,
                new CompletableFuture<>())), c -> c.status(name));
    }

    /**
     * @param name the lock
     * @return every holder and waiter of the lock
     */
    public Holders holders(String name) {
        Wire.checkName(name, "lock name");
        return byName(name, () -> (Holders) e.await(e.submitCall(now -> new Engine.Req("HOLDERS", name), false,
                new CompletableFuture<>())), c -> c.holders(name));
    }

    /**
     * Asks the server whether token holds the lock name now: the fence check of a resource that was handed a token by
     * a holder (the holder itself may call {@link Lease#check()}).
     *
     * @param name the lock
     * @param token the token (unsigned 64-bit)
     * @throws LeaseLostException (code {@code "STALE"}) if it does not
     */
    public void check(String name, long token) {
        Wire.checkName(name, "lock name");
        byName(name, () -> e.await(e.submitCall(now -> {
            Engine.Req q = new Engine.Req("CHECK", name);
            q.token = token;
            return q;
        }, false)), c -> {
            c.check(name, token);
            return null;
        });
    }

    /**
     * Ends the lease of name whose token is token, whoever holds it: an operator's tool for a holder that is gone or
     * stuck (it needs the break right on the name when the server has a users file). The reason (one word: a ticket,
     * or why) is logged by the server and told to the holder's connections as {@code broken_by}; the next waiter is
     * granted the lock with a larger token.
     *
     * @param name the lock
     * @param token the lease's token (from {@link #status} or {@link #holders})
     * @param reason 1-128 printable ASCII characters, no space
     * @throws LeaseLostException (code {@code "STALE"}) when token holds nothing (the lock moved on, or is free)
     * @throws DeniedException without the right
     * @throws ConnectionLostException when the connection was lost after the BREAK was written: the lease may or may
     *     not have been broken ({@link #status} tells)
     */
    public void breakLease(String name, long token, String reason) {
        Wire.checkName(name, "lock name");
        if (reason == null || reason.length() > Wire.REASON_MAX || !Wire.printableWord(reason)) {
            throw new IllegalArgumentException("bad reason '" + reason + "': 1-" + Wire.REASON_MAX + " printable ASCII characters, no space");
        }
        byName(name, () -> e.await(e.submitCall(now -> {
            Engine.Req q = new Engine.Req("BREAK", name);
            q.token = token;
            q.reason = reason;
            return q;
        }, false)), c -> {
            c.breakLease(name, token, reason);
            return null;
        });
    }

    /**
     * A call about name: here on this client's connection while it is unpartitioned (a MOVED may make it a router:
     * {@link #promote}), else op on the leg of the name's partition.
     */
    private <T> T byName(String name, Supplier<T> here, Function<DlockClient, T> op) {
        Router r = router;
        if (r == null) {
            try {
                return here.get();
            } catch (MovedException m) {
                return promote(m).callAfter(name, m, op);
            }
        }
        return r.call(name, op);
    }

    /** Asks the server for a PONG. */
    public void ping() {
        e.await(e.submitCall(now -> new Engine.Req("PING", ""), false, new CompletableFuture<>()));
    }

    /**
     * Watches locks one does not hold: every change of their holders or of a holder's value, whoever made it, until
     * the watch or the client is closed. After a reconnect or a fail-over the client watches again and queues a
     * {@link WatchEvent.Kind#RESUMED} event for each pattern (what changed meanwhile was not seen), or
     * {@link WatchEvent.Kind#REFUSED}.
     *
     * @param patterns lock names, or prefixes followed by '*' ("*" alone: every lock)
     * @return the watch, to read events from and close
     */
    public Watch watch(String... patterns) {
        if (patterns.length == 0) throw new IllegalArgumentException("watch: no pattern");
        for (String p : patterns) Wire.checkPattern(p);
        Router r = router;
        if (r == null) {
            try {
                return watchInto(null, List.of(patterns));
            } catch (MovedException m) {
                // a name of another partition: the service is partitioned
                r = promote(m);
                if (patterns.length == 1) return r.callAfter(patterns[0], m, c -> c.watchInto(null, List.of(patterns)));
            }
        }
        return r.watch(List.of(patterns));
    }

    /** Watches patterns on this client's connection; the events go to sink when it is not null (w is its part). */
    Watch watchInto(Watch sink, List<String> patterns) {
        Watch w = new Watch(e, sink, patterns);
        List<CompletableFuture<Object>> fs = new ArrayList<>();
        if (!e.exec(() -> {
            e.watches.add(w);
            for (String p : patterns) {
                CompletableFuture<Object> f = new CompletableFuture<>();
                fs.add(f);
                e.submitCall(now -> {
                    Engine.Req q = new Engine.Req("WATCH", p);
                    q.watch = w;
                    return q;
                }, false, f);
            }
        })) {
            throw DlockException.of(DlockException.Kind.CLOSED, "the client is closed");
        }
        RuntimeException first = null;
        for (CompletableFuture<Object> f : fs) {
            try {
                e.await(f);
            } catch (RuntimeException x) {
                if (first == null) first = x;
            }
        }
        if (first != null) {
            e.exec(() -> e.unwatch(w));
            throw first;
        }
        e.exec(() -> w.active = true);
        return w;
    }

    // ---- the Lock adapter -----------------------------------------------------------------

    /**
     * @param name the lock
     * @param ttl the TTL of each hold (null: the server's default)
     * @return a {@link java.util.concurrent.locks.Lock} over name
     */
    public DlockLock newLock(String name, Duration ttl) {
        return newLock(name, ttl == null ? LockOptions.DEFAULT : LockOptions.ttl(ttl));
    }

    /**
     * @param name the lock
     * @param opts the options of each hold (their wait is the Lock method's)
     * @return a {@link java.util.concurrent.locks.Lock} over name
     */
    public DlockLock newLock(String name, LockOptions opts) {
        Wire.checkName(name, "lock name");
        return new DlockLock(this, name, opts);
    }

    // ---- the client ---------------------------------------------------------------------

    /** @return the owner id the client says in HELLO */
    public String owner() {
        return e.owner;
    }

    /**
     * @return the secret that proves the owner id (given, or the server's). Another process given owner(id + "=" +
     *     key) acts as the same owner: handle it as a password.
     */
    public String ownerKey() {
        return e.publicKey();
    }

    /**
     * @return the cluster id the client holds to (pinned, or the first a server named); "" while none did. On a
     *     partitioned service: the first connection's partition's
     */
    public String clusterId() {
        return e.publicCluster();
    }

    /**
     * Stops the client: pending calls fail with {@link ClientClosedException}, the connection is closed, and every
     * thread of the client has ended when this returns. Leases still held are <b>not released</b> (they end at the
     * server by their TTL); they are reported lost ({@link LostReason#CLIENT_CLOSED}). Watches end.
     */
    @Override
    public void close() {
        Router r;
        synchronized (routeMu) {
            closed = true;
            r = router;
        }
        if (r != null) r.close();
        else e.close();
    }

    Engine engine() {
        return e;
    }
}
