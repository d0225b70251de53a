package dlockd;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * A client of a partitioned service ({@code MAP} said an epoch above 0 when it first connected, or when it was asked
 * again after a {@code NO MOVED}: {@link DlockClient#promote}): a router over one
 * ordinary client per partition, its <em>legs</em>. The client's first connection ({@link #home}) stays for what names
 * no lock ({@code PING}, a watch of prefixes); every call about a name goes to the leg of the partition that serves the
 * name's slot, made on first use with the builder's settings (the owner id and key of the first connection, no pinned
 * cluster id: each leg holds to the first its partition's daemons name) and the partition's addresses from the map,
 * and is delegated to it unchanged -- so a leg fails over, confirms leases and sends waits again as any client does,
 * and the leases it grants stay bound to it until their slot moves (below). A {@code NO MOVED} reply is followed: with
 * a newer map epoch than the router's, the map is read again (from the daemon that said it, else the first
 * connection) and the call routed by it; with the router's, the call goes to the partition named; with an older one
 * the daemon is behind ({@link #behind}), and the call goes by the router's map. At most {@value #MAX_REDIRECTS}
 * redirects per call, then {@link MovedException}; an acquire sent on keeps its request id ({@code req=}) and what is
 * left of its wait.
 *
 * <p>Threads: the map is an immutable snapshot (volatile); the legs and the state below are guarded by {@link #mu},
 * never held around I/O (a leg is made, and a map read, outside it). A leg is made by the first call that needs it,
 * other calls wait for that one. The asynchronous calls follow a {@code MOVED} on a thread of the router's own
 * ({@code dlockd-router-N}), as they make a leg that does not exist yet.
 *
 * <p><b>Leases follow their slot.</b> A {@code PARTITION MOVE} carries the slots' locks to the receiving partition, same
 * token: the giving daemon then answers {@code NO MOVED} to every request about them. A request about a lease (its
 * renewal, a refresh, an unlock, a check) answered so has the lease <em>re-homed</em> ({@link #follow}): taken off the
 * leg that granted it and given to the leg of the partition the {@code MOVED} names (or the newer map says), made if
 * need be, so that every later request about it -- the renewals too -- goes there; the request is then sent there
 * again. The router is each leg's {@link Follower} (and its first connection's), which asks it.
 */
final class Router implements Follower {
    static final int MAX_REDIRECTS = 3;
    private static final AtomicInteger POOL_IDS = new AtomicInteger();

    private final Config base;
    /** The first connection: an ordinary client of the daemon the builder's list led to. */
    final DlockClient home;
    private final ReentrantLock mu = new ReentrantLock();
    private volatile PartitionMap map; // written under mu, only ever to a newer epoch

    // guarded by mu
    private final Map<String, Leg> legs = new HashMap<>();
    private boolean closed;
    private ExecutorService pool;

    /** The ordinary client of one partition, made once (client completes when it is, or failed to be). */
    private static final class Leg {
        final String id;
        String addrs; // the list it was made with, or last given (under mu)
        final CompletableFuture<DlockClient> client = new CompletableFuture<>();

        Leg(String id, String addrs) {
            this.id = id;
            this.addrs = addrs;
        }
    }

    Router(Config base, DlockClient home, PartitionMap map) {
        this.base = base;
        this.home = home;
        this.map = map;
        home.engine().follower = this;
    }

    PartitionMap map() {
        return map;
    }

    // ---- the legs ------------------------------------------------------------------------

    /** The daemons' addresses of a map's list, at most the client's 8. */
    static List<Config.Address> addrList(String s) {
        List<String> parts = Arrays.asList(s.split(",", -1));
        if (parts.size() > Wire.SERVERS_MAX) parts = parts.subList(0, Wire.SERVERS_MAX);
        return Config.parseServers(String.join(",", parts));
    }

    /** The leg of the partition that serves name by the router's map; the first connection when none does. */
    DlockClient legOf(String name) {
        PartitionMap m = map;
        int i = m.partOf(Slots.of(name));
        if (i < 0) return home; // its daemon says why (no partition serves the slot), or MOVED with a newer map
        return leg(m.ids.get(i), null);
    }

    /** The leg of name, if it needs no waiting: made already (or the first connection); else null. */
    private DlockClient readyLeg(String name) {
        PartitionMap m = map;
        int i = m.partOf(Slots.of(name));
        if (i < 0) return home;
        mu.lock();
        try {
            Leg g = legs.get(m.ids.get(i));
            if (g == null || !g.client.isDone() || g.client.isCompletedExceptionally()) return null;
            return g.client.join();
        } finally {
            mu.unlock();
        }
    }

    /**
     * The leg of partition id, made now if there is none: of the addresses given (a MOVED's), else the map's.
     *
     * @throws UnavailableException when no address of the partition is known, or none could be used
     */
    DlockClient leg(String id, String addrs) {
        Leg g;
        boolean mine = false;
        mu.lock();
        try {
            if (closed) throw DlockException.of(DlockException.Kind.CLOSED, "the client is closed");
            g = legs.get(id);
            if (g == null) {
                String a = addrs == null || addrs.isEmpty() ? map.addrsOf(id) : addrs;
                if (a == null || a.isEmpty()) {
                    throw DlockException.of(DlockException.Kind.UNAVAILABLE, "partition " + id
                            + ": the partition map (epoch " + map.epoch + ") knows no address of its daemons");
                }
                g = new Leg(id, a);
                legs.put(id, g);
                mine = true;
            }
        } finally {
            mu.unlock();
        }
        if (mine) make(g);
        try {
            return g.client.get();
        } catch (InterruptedException x) {
            Thread.currentThread().interrupt();
            throw DlockException.of(DlockException.Kind.INTERRUPTED, "interrupted");
        } catch (ExecutionException x) {
            throw Engine.rethrow(x.getCause());
        }
    }

    /** Makes leg g's client (blocking up to the connect timeout), or forgets g so that the next call tries again. */
    private void make(Leg g) {
        DlockClient c;
        try {
            Config cfg = base.copy();
            cfg.addrs = addrList(g.addrs);
            cfg.owner = home.owner();
            cfg.key = home.ownerKey();
            cfg.cluster = ""; // a partition is a cluster of its own: the leg holds to the first id its daemons name
            c = DlockClient.open(cfg);
            c.engine().follower = this; // its leases follow their slots through the router
        } catch (RuntimeException x) {
            mu.lock();
            try {
                if (legs.get(g.id) == g) legs.remove(g.id);
            } finally {
                mu.unlock();
            }
            RuntimeException e = x instanceof IllegalArgumentException
                    ? DlockException.of(DlockException.Kind.UNAVAILABLE, "partition " + g.id + ": " + x.getMessage()) : x;
            g.client.completeExceptionally(e);
            return;
        }
        boolean late;
        List<Config.Address> newer = null;
        mu.lock();
        try {
            late = closed;
            if (!late) {
                g.client.complete(c);
                newer = newAddrs(g, map); // a map adopted while it was made
            }
        } finally {
            mu.unlock();
        }
        if (late) {
            c.close();
            g.client.completeExceptionally(DlockException.of(DlockException.Kind.CLOSED, "the client is closed"));
        } else if (newer != null) {
            c.engine().setServers(newer);
        }
    }

    /** The addresses m gives made leg g if they are new to it (then they are its), else null. Under mu. */
    private static List<Config.Address> newAddrs(Leg g, PartitionMap m) {
        String a = m.addrsOf(g.id);
        if (a == null || a.isEmpty() || a.equals(g.addrs)) return null;
        try {
            List<Config.Address> l = addrList(a);
            g.addrs = a;
            return l;
        } catch (IllegalArgumentException x) {
            return null; // a list the client cannot use: the old one stays
        }
    }

    // ---- the map -------------------------------------------------------------------------

    /** Takes m if it is newer than the router's map; the legs of partitions whose addresses changed get the new ones. */
    private void adopt(PartitionMap m) {
        List<DlockClient> cs = new ArrayList<>();
        List<List<Config.Address>> as = new ArrayList<>();
        mu.lock();
        try {
            if (m.epoch <= map.epoch) return;
            map = m;
            for (Leg g : legs.values()) {
                if (!g.client.isDone() || g.client.isCompletedExceptionally()) continue; // it looks once made
                List<Config.Address> l = newAddrs(g, m);
                if (l != null) {
                    cs.add(g.client.join());
                    as.add(l);
                }
            }
        } finally {
            mu.unlock();
        }
        for (int i = 0; i < cs.size(); i++) cs.get(i).engine().setServers(as.get(i));
    }

    /** Reads MAP from via (the daemon that said MOVED), else from the first connection, and adopts what is newer. */
    private void refresh(DlockClient via) {
        PartitionMap m = null;
        try {
            m = via.readMap();
        } catch (DlockException x) {
            // the first connection may know
        }
        if ((m == null || m.epoch <= map.epoch) && via != home) {
            try {
                PartitionMap h = home.readMap();
                if (m == null || h.epoch > m.epoch) m = h;
            } catch (DlockException x) {
                // nothing newer to be had now: the MOVED says where
            }
        }
        if (m != null && m.epoch > 0) adopt(m);
    }

    /**
     * Where a call answered m goes next: null to route it by the router's map (read again when m's epoch is newer or m
     * names no partition; as it is when m's is older: the daemon that said it is behind), else {partition, addresses}
     * as m says.
     */
    private String[] redirect(MovedException m, DlockClient via) {
        if (m.partition().isEmpty()) {
            refresh(via); // it names no partition (a waiting multi-lock's): the map says
            return null;
        }
        if (m.mapEpoch() > map.epoch) {
            refresh(via);
            if (map.epoch >= m.mapEpoch()) return null;
        }
        if (m.mapEpoch() != 0 && m.mapEpoch() < map.epoch) return null;
        return new String[] {m.partition(), m.addresses()};
    }

    /**
     * Whether m, said by c about name, comes from a daemon behind the router's map, which sends the name to c all the
     * same: the receiver of a slot that has not read the map that gives it the slot yet (it reads it within a second).
     * The call then goes to c again after a pause ({@link #pause}), not counted as a redirect.
     */
    private boolean behind(MovedException m, DlockClient c, String name) {
        return m.mapEpoch() != 0 && m.mapEpoch() < map.epoch && readyLeg(name) == c;
    }

    @Override
    public boolean behind(Engine from, String name, MovedException m) {
        DlockClient c = readyLeg(name);
        return m.mapEpoch() != 0 && m.mapEpoch() < map.epoch && c != null && c.engine() == from;
    }

    /** The first pause before a call is sent again to a slot on the move; doubled each time up to PAUSE_MAX_MS. */
    static final long PAUSE_MIN_MS = 10, PAUSE_MAX_MS = 200;

    /**
     * The pauses of one call sent again while its name's slot is on the move (a daemon behind the map, or
     * {@code ERR UNAVAILABLE} "is moving" / "is arriving"): for up to the server timeout from the first.
     */
    static final class Pauses {
        private final double timeoutMs;
        private double until = -1;
        private long next = PAUSE_MIN_MS;

        Pauses(double timeoutMs) {
            this.timeoutMs = timeoutMs;
        }

        /** The pause to make now, or -1 when the time is up (the call then fails as it was answered). */
        synchronized long next() {
            double now = Engine.nowMs();
            if (until < 0) until = now + timeoutMs;
            if (now + next > until) return -1;
            long p = next;
            next = Math.min(next * 2, PAUSE_MAX_MS);
            return p;
        }
    }

    Pauses pauses() {
        return new Pauses(base.serverTimeout.toNanos() / 1e6);
    }

    /** Sleeps ms; an interrupt throws DlockInterruptedException (the flag kept). */
    static void pause(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException x) {
            Thread.currentThread().interrupt();
            throw DlockException.of(DlockException.Kind.INTERRUPTED, "interrupted");
        }
    }

    /** Whether x says that the slot of the name is on the move: sent again in a moment. */
    static boolean moveUnderWay(Throwable x) {
        return x instanceof UnavailableException && Lease.moveUnderWay((DlockException) x);
    }

    static MovedException tooMany(String name, MovedException m) {
        return new MovedException(m.code(), m.serverLine(), name + ": sent to another partition " + (MAX_REDIRECTS + 1)
                + " times, last to " + m.partition() + " (map epoch " + m.mapEpoch() + "); the partition map is changing",
                m.partition(), m.addresses(), m.mapEpoch());
    }

    // ---- calls ---------------------------------------------------------------------------

    /** Runs op on the leg of name, following MOVED. */
    <T> T call(String name, Function<DlockClient, T> op) {
        return call(name, op, null, 0);
    }

    /**
     * Sends on a call about name that the first connection answered first while the client was not a router yet (its
     * first {@code MAP} said no map: {@link DlockClient#promote}): first is the call's first redirect, counted in the
     * {@value #MAX_REDIRECTS}.
     */
    <T> T callAfter(String name, MovedException first, Function<DlockClient, T> op) {
        return call(name, op, redirect(first, home), 1);
    }

    private <T> T call(String name, Function<DlockClient, T> op, String[] to, int redirects) {
        Pauses ps = null;
        while (true) {
            DlockClient c = to == null ? legOf(name) : leg(to[0], to[1]);
            try {
                return op.apply(c);
            } catch (MovedException m) {
                if (behind(m, c, name)) {
                    if (ps == null) ps = pauses();
                    long p = ps.next();
                    if (p >= 0) {
                        pause(p);
                        to = null;
                        continue;
                    }
                }
                if (redirects >= MAX_REDIRECTS) throw tooMany(name, m);
                redirects++;
                to = redirect(m, c);
            } catch (UnavailableException u) {
                if (!moveUnderWay(u)) throw u;
                if (ps == null) ps = pauses();
                long p = ps.next();
                if (p < 0) throw u;
                pause(p); // then to the same partition again
            }
        }
    }

    /**
     * A routed call's future: cancelling it cancels the attempt under way. (An unpartitioned client's acquire future is
     * one too, for the MOVED that makes the client a router: {@link #callAsyncAfter}.)
     */
    static class Routed<T> extends CompletableFuture<T> {
        volatile CompletableFuture<T> cur;
        volatile Pauses pauses; // while the name's slot is on the move (made by the first pause)

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            boolean r = super.cancel(mayInterruptIfRunning);
            if (r) {
                CompletableFuture<T> c = cur;
                if (c != null) c.cancel(mayInterruptIfRunning);
            }
            return r;
        }

        @Override
        public <U> CompletableFuture<U> newIncompleteFuture() {
            return new CompletableFuture<>();
        }
    }

    /**
     * Runs op (an acquire, whose future's cancel gives it up) on the leg of name, following MOVED; a lease granted to
     * a future cancelled meanwhile is given back. Without blocking the caller: a leg still to be made, and a map to be
     * read again, are waited for on a thread of the router's.
     */
    <T> CompletableFuture<T> callAsync(String name, Function<DlockClient, CompletableFuture<T>> op) {
        Routed<T> out = new Routed<>();
        DlockClient c = readyLeg(name);
        if (c != null) attempt(out, name, c, null, 0, op);
        else run(out, () -> attempt(out, name, null, null, 0, op));
        return out;
    }

    /**
     * Sends on, into out, an asynchronous call about name that the first connection answered first while the client
     * was not a router yet ({@link DlockClient#promote}): first is its first redirect, counted in the
     * {@value #MAX_REDIRECTS}. On a thread of the router's (the map may be read again, a leg made).
     */
    <T> void callAsyncAfter(Routed<T> out, String name, MovedException first,
            Function<DlockClient, CompletableFuture<T>> op) {
        run(out, () -> attempt(out, name, null, redirect(first, home), 1, op));
    }

    private <T> void attempt(Routed<T> out, String name, DlockClient leg, String[] to, int redirects,
            Function<DlockClient, CompletableFuture<T>> op) {
        if (out.isDone()) return;
        DlockClient c;
        CompletableFuture<T> f;
        try {
            c = leg != null ? leg : to == null ? legOf(name) : leg(to[0], to[1]);
            f = op.apply(c);
        } catch (RuntimeException x) {
            out.completeExceptionally(x);
            return;
        }
        out.cur = f;
        if (out.isCancelled()) f.cancel(false);
        f.whenComplete((v, x) -> {
            if (x == null) {
                if (!out.complete(v)) giveBack(v);
                return;
            }
            Throwable t = x instanceof CompletionException && x.getCause() != null ? x.getCause() : x;
            boolean behind = t instanceof MovedException && behind((MovedException) t, c, name);
            if ((behind || moveUnderWay(t)) && !out.isDone()) {
                // the name's slot is on the move: the same partition again in a moment
                if (out.pauses == null) out.pauses = pauses();
                long p = out.pauses.next();
                if (p >= 0) {
                    run(out, () -> {
                        pause(p);
                        attempt(out, name, behind ? null : c, null, redirects, op); // behind: by the map
                    });
                    return;
                }
            }
            if (t instanceof MovedException && !out.isDone()) {
                MovedException m = (MovedException) t;
                if (redirects >= MAX_REDIRECTS) {
                    out.completeExceptionally(tooMany(name, m));
                    return;
                }
                run(out, () -> attempt(out, name, null, redirect(m, c), redirects + 1, op));
                return;
            }
            if (!(t instanceof CancellationException)) out.completeExceptionally(t);
        });
    }

    /** Gives back what an acquire granted to a future cancelled meanwhile. */
    private static void giveBack(Object v) {
        List<Lease> ls = v instanceof Lease ? List.of((Lease) v) : v instanceof Leases ? ((Leases) v).list() : List.of();
        for (Lease l : ls) l.exec(e -> e.giveBack(l));
    }

    /** Runs r on a thread of the router's; out fails if r throws, or the client is closed. */
    private void run(CompletableFuture<?> out, Runnable r) {
        ExecutorService p;
        mu.lock();
        try {
            if (!closed && pool == null) {
                int n = POOL_IDS.incrementAndGet();
                AtomicInteger ts = new AtomicInteger();
                pool = Executors.newCachedThreadPool(x -> {
                    Thread t = new Thread(x, "dlockd-router-" + n + "-" + ts.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
            }
            p = closed ? null : pool;
        } finally {
            mu.unlock();
        }
        try {
            if (p == null) throw new RejectedExecutionException();
            p.execute(() -> {
                try {
                    r.run();
                } catch (RuntimeException x) {
                    out.completeExceptionally(x);
                }
            });
        } catch (RejectedExecutionException x) {
            out.completeExceptionally(DlockException.of(DlockException.Kind.CLOSED, "the client is closed"));
        }
    }

    // ---- leases that follow their slot ------------------------------------------------------

    /** The client whose engine e is: the first connection, or a leg (the first connection when none is). */
    private DlockClient clientOf(Engine e) {
        if (home.engine() == e) return home;
        mu.lock();
        try {
            for (Leg g : legs.values()) {
                if (!g.client.isDone() || g.client.isCompletedExceptionally()) continue;
                DlockClient c = g.client.join();
                if (c.engine() == e) return c;
            }
        } finally {
            mu.unlock();
        }
        return home;
    }

    @Override
    public DlockClient route(Engine from, String name, MovedException m) {
        String[] to = redirect(m, clientOf(from));
        return to == null ? legOf(name) : leg(to[0], to[1]);
    }

    @Override
    public boolean follow(Engine from, Lease l, MovedException m) {
        if (behind(from, l.name, m)) return l.c != from; // the daemon is behind the map, which sends l there
        Engine to = route(from, l.name, m).engine();
        if (to == from) return l.c != from;
        return Lease.move(l, from, to);
    }

    @Override
    public void async(Runnable r) {
        run(new CompletableFuture<Void>(), r); // what fails is the caller's to handle (it retries)
    }

    // ---- watches -------------------------------------------------------------------------

    /**
     * Watches patterns: prefixes on the first connection (its partition's locks only), each exact name on its leg; a
     * watch of several connections is made of parts, one queue.
     */
    Watch watch(List<String> patterns) {
        List<String> prefixes = new ArrayList<>(), names = new ArrayList<>();
        for (String p : patterns) (p.endsWith("*") ? prefixes : names).add(p);
        if (names.isEmpty()) return home.watchInto(null, patterns);
        if (prefixes.isEmpty() && names.size() == 1) return call(names.get(0), c -> c.watchInto(null, names));
        Watch w = Watch.ofParts(patterns);
        try {
            if (!prefixes.isEmpty()) w.addPart(home.watchInto(w, prefixes));
            for (String n : names) w.addPart(call(n, c -> c.watchInto(w, List.of(n))));
        } catch (RuntimeException x) {
            w.close();
            throw x;
        }
        w.seal();
        return w;
    }

    // ---- closing -------------------------------------------------------------------------

    /** Closes every leg, then the first connection. */
    void close() {
        List<DlockClient> cs = new ArrayList<>();
        ExecutorService p;
        mu.lock();
        try {
            closed = true;
            for (Leg g : legs.values()) {
                if (g.client.isDone() && !g.client.isCompletedExceptionally()) cs.add(g.client.join());
            }
            p = pool;
            pool = null;
        } finally {
            mu.unlock();
        }
        for (DlockClient c : cs) c.close();
        home.close();
        if (p != null) p.shutdown();
    }

    /** The legs made so far, by partition (for tests). */
    Map<String, DlockClient> legs() {
        Map<String, DlockClient> out = new HashMap<>();
        mu.lock();
        try {
            for (Leg g : legs.values()) {
                if (g.client.isDone() && !g.client.isCompletedExceptionally()) out.put(g.id, g.client.join());
            }
        } finally {
            mu.unlock();
        }
        return out;
    }
}
