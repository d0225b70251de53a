package dlockd;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The client's protocol state and what acts on it from the client's side, after the Go client's core.go (its
 * requests, leases, turns and timers): the base of {@link Engine} ({@code Core <- Protocol <- Engine}, one object).
 *
 * <p>Owns: the clock ({@link #nowMs}); the request and turn types ({@link Req}, {@link Ticket}); all protocol state
 * that requests, leases and timers touch (the connection's state as far as requests care, the request queues, the
 * leases, the turns, the watches, the client's identity); and the code over it: request formatting and writing to
 * the output buffer, submitting, deadlines, giving up and finishing requests, turns, lease renewal and loss
 * ({@link #tick}), watching again.
 *
 * <p>Threads: everything here runs under the client's lock ({@link Engine#mu}, on whichever thread holds it) and its
 * fields are guarded by it, but for {@link #nowMs} (any thread, lock-free) and {@link #publicKey}/{@link #publicCluster}
 * (any thread, under pubMu). It never blocks on the network: lines written go to {@link #out}, which {@link Engine}
 * writes out without blocking. What it needs from the threads is {@link #callback}, {@link #exec}, {@link #complete}
 * and {@link #wakeAt}.
 */
abstract sealed class Core permits Protocol {
    static final double GUARD_MIN_MS = 20;
    static final double NEVER = Double.POSITIVE_INFINITY;

    enum St { DOWN, CONNECTING, UP, DEAD }

    enum Where { NOWHERE, UNSENT, SENT, WAITING, TURN }

    static final double SUSPEND_MIN_MS = 250;
    /** How long a snapshot of the clocks is compared against before a newer one is taken (ms). */
    static final double CLOCK_SNAP_MS = 100;

    /** The clocks as last compared: monotonic ns, wall ms, and the suspended time counted until then. */
    private record Snap(long mono, long wall, double suspended) { }

    private static final java.util.concurrent.atomic.AtomicReference<Snap> SNAP =
            new java.util.concurrent.atomic.AtomicReference<>(new Snap(System.nanoTime(), System.currentTimeMillis(), 0));

    /**
     * The client's clock (ms): the monotonic clock, plus the time the machine was suspended. Java has no
     * CLOCK_BOOTTIME (which the Go client reads): the monotonic clock stops during a suspend while the server's and a
     * lease's time go on. So a wall clock that moved SUSPEND_MIN_MS or more past the monotonic one since the last
     * snapshot of both is taken for a suspend and counted as time passed -- also when it was a step of the wall clock,
     * which only makes leases end early (fail-safe). Lock-free: a snapshot is taken at most every CLOCK_SNAP_MS (a
     * slewed wall clock never adds up to a suspend), and at once when a suspend is counted.
     */
    static double nowMs() {
        while (true) {
            Snap s = SNAP.get();
            long mono = System.nanoTime(), wall = System.currentTimeMillis();
            double monoMs = (mono - s.mono) / 1e6;
            double gap = (wall - s.wall) - monoMs;
            if (gap >= SUSPEND_MIN_MS) {
                Snap n = new Snap(mono, wall, s.suspended + gap);
                if (!SNAP.compareAndSet(s, n)) continue;
                return mono / 1e6 + n.suspended;
            }
            if (monoMs >= CLOCK_SNAP_MS) SNAP.compareAndSet(s, new Snap(mono, wall, s.suspended));
            return mono / 1e6 + s.suspended;
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
        int moves; // an UNLOCK sent on to another partition: the MOVED answers it followed
        int lockWrites; // how often the LOCK was written: each may have made one hold
        long reqId; // LOCK: the acquire's request id (req=, unsigned, never 0), the same on every write of it
        boolean notify; // LOCK: notify=waiters
        int waiters; // CONFIRM: what a * WAITING said of its grant before the lease was made
        String value = ""; // LOCK: the lease's value; REFRESH: a proclaim's new one (encoded as sent; "": none)
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
        Thread caller; // the thread that waits for done (unparked when it completes), or null
        Runnable hook;
        // a multi-lock (DlockClient.lockAll): its names in byte order (name is the first), its turns in that order;
        // the grants of its * LOCKED being confirmed, and how many confirmations are still to come. With one name
        // it is an ordinary LOCK whose lease is handed out as Leases.
        List<String> names;
        List<Ticket> tickets;
        List<Grant> grants;
        int pending;
        Req parent; // MCONFIRM: the multi-lock whose grant it confirms
        Grant grant; // MCONFIRM: that grant

        Req(String op, String name) {
            this.op = op;
            this.name = name;
        }
    }

    /** One lease of a multi-lock's grant (a body line {@code granted <name> <token> <ttl_ms> holds=1 ...}). */
    static final class Grant {
        final String name;
        final long token;
        final Wire.Reply line; // the body line, as a GRANTED reply (its proof=, until=)
        double ms, sentAt; // what the server said remains, of the request written at sentAt
        Wire.Reply confirm; // the REFRESHED that confirmed it, if it came as an event
        boolean expired; // its confirmation was answered NOT_HOLDER
        DlockException err; // its confirmation failed so

        Grant(String name, long token, double ms, Wire.Reply line) {
            this.name = name;
            this.token = token;
            this.ms = ms;
            this.line = line;
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

    final Config cfg;
    final String owner;

    // guarded by the client's lock (Engine.mu)
    String key; // the owner's secret said in HELLO (given, or the server's)
    St state = St.DOWN; // the connection's
    boolean closing; // shutdown ran: no new request
    final StringBuilder out = new StringBuilder(); // lines formatted and not yet handed to the writer (Engine.flush)
    final ArrayDeque<Req> fifo = new ArrayDeque<>(); // written, their reply awaited, in order
    List<Req> unsent = new ArrayList<>(); // kept to be written once a session is up
    final PriorityQueue<Req> timed = new PriorityQueue<>(Comparator.comparingDouble(q -> q.deadline));
    Map<String, Req> waiting = new HashMap<>(); // LOCKs QUEUED at the server, by tag
    int crossing; // CANCELs written whose wait's grant may still come
    int seq; // the last tag's number
    final List<Lease> leases = new ArrayList<>();
    final Map<String, ArrayDeque<Ticket>> turns = new HashMap<>();
    int addrI; // the server in use or being dialed (here())
    String lastError = "";
    boolean sessionOK; // HELLO was answered OK on this connection
    boolean takesReq; // this connection's HELLO said version 0.4.0 or later: LOCK takes req=
    boolean dropWanted; // drop the connection once the work under the lock is done
    double helloBy; // HELLO must be answered by then
    String cluster; // the cluster id held to ("" until a server names one)
    String clusterFrom = ""; // the server that named it
    final List<Watch> watches = new ArrayList<>();
    /** The request of each pending future: to give it up. */
    final Map<CompletableFuture<Object>, Req> reqOf = new java.util.IdentityHashMap<>();

    // shared: the published copies of key and cluster, read by callers
    private final ReentrantLock pubMu = new ReentrantLock();
    private String pubKey, pubCluster; // guarded by pubMu

    Core(Config cfg) {
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
        this.pubKey = key;
        this.pubCluster = cluster;
    }

    /** Runs user code off the client's lock (on the callback thread). */
    abstract void callback(Runnable r);

    /** Runs f under the client's lock; false if the client is closed. */
    abstract boolean exec(Runnable f);

    /** Completes a future no user code depends on, once the client's lock is let go. */
    abstract void complete(CompletableFuture<Object> f, DlockException err, Object result, Thread caller);

    /** Something is due at t (Core.nowMs): the manager thread looks then at the latest. */
    abstract void wakeAt(double t);

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

    String here() {
        return cfg.addrs.get(addrI).name;
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
                String[] ns = q.names != null && q.names.size() > 1 ? q.names.toArray(new String[0]) : new String[] {q.name};
                Wire.Line l = new Wire.Line(q.wait == 0 ? "TRYLOCK" : "LOCK", ns).kv("ttl", String.valueOf((long) q.ttl));
                if (q.wait < 0) {
                    l.kv("wait", "inf");
                } else if (q.wait > 0) {
                    if (q.waitEnd == NEVER) q.waitEnd = now + q.wait;
                    l.kv("wait", String.valueOf((long) Math.max(q.waitEnd - now, 1)));
                }
                if (q.shared) l.kv("mode", "shared");
                if (q.limit > 1) l.kv("limit", String.valueOf(q.limit));
                // the same id on every write of this acquire, to a server that takes it (a 0.3 one refuses it)
                if (q.reqId != 0 && takesReq) l.kv("req", Long.toUnsignedString(q.reqId));
                if (q.notify) l.kv("notify", "waiters");
                l.kv("value", q.value);
                return l.build(q.tag);
            }
            case "CONFIRM": case "MCONFIRM": case "RENEW": case "REFRESH": {
                Wire.Line l = new Wire.Line("REFRESH", q.name, Wire.u64(q.token)).kv("ttl", String.valueOf((long) q.ttl));
                // a proclaim's value; a CONFIRM's grant has the LOCK's already
                if (q.op.equals("REFRESH")) l.kv("value", q.value);
                return l.build(q.tag);
            }
            case "RECLAIM": {
                Lease l = q.lease;
                Wire.Line ln = new Wire.Line("RECLAIM", q.name, Wire.u64(q.token)).kv("proof", l.proof)
                        .kv("until", String.valueOf(l.until)).kv("ttl", String.valueOf((long) q.ttl));
                if (l.mode == Lease.Mode.SHARED) ln.kv("mode", "shared");
                if (l.limit > 1) ln.kv("limit", String.valueOf(l.limit));
                ln.kv("value", l.value); // what the lost record held
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
    void confirmLease(Lease l, Req q, double sentAt, double ms) {
        double d = sentAt + ms - slackMs(ms);
        for (Req o : fifo) {
            if (o == q || o.lease != l || o.ttl <= 0 || !(o.op.equals("REFRESH") || o.op.equals("RENEW") || o.op.equals("RECLAIM"))) continue;
            double e = o.sentAt + o.ttl - slackMs(o.ttl);
            if (e < d) d = e;
        }
        l.renewAt = sentAt + l.ttl / 3;
        l.atRiskM = false;
        l.moves = 0;
        l.setDeadline(d, false);
    }

    void write(Req q, double now) {
        out.append(format(q, now));
        q.sentAt = now;
        q.where = Where.SENT;
        if (q.op.equals("LOCK")) q.lockWrites++;
        // A REFRESH that shortens the lease may take effect even if its reply never comes: count on it from now.
        // (Not of a lease that moved to another partition's client since: its state is that one's.)
        Lease l = q.lease;
        if ((q.op.equals("REFRESH") || q.op.equals("RENEW")) && l != null && l.c == this && q.ttl > 0) {
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

    void renewLease(Lease l, double now) {
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
            wakeAt(d);
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
                if (q.tickets != null) for (Ticket t : q.tickets) if (t.waiter == q) t.waiter = null;
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
        if (q.tickets != null && !(result instanceof Leases)) {
            List<Ticket> ts = q.tickets;
            q.tickets = null;
            for (Ticket t : ts) giveTurn(t);
        }
        if (q.hook != null) {
            q.hook.run();
            q.hook = null;
        }
        CompletableFuture<Object> f = q.done;
        if (f == null) return;
        reqOf.remove(f);
        if (!q.exposed) {
            complete(f, err, result, q.caller); // once the lock is let go
            return;
        }
        // a future the caller sees: its dependents must not run on this thread
        callback(() -> {
            if (err != null) {
                f.completeExceptionally(err);
            } else if (!f.complete(result) && (result instanceof Lease || result instanceof Leases)) {
                // cancelled meanwhile: give the grants back
                List<Lease> ls = result instanceof Lease ? List.of((Lease) result) : ((Leases) result).list();
                for (Lease l : ls) l.exec(e -> e.giveBack(l));
            }
        });
    }

    /** Releases a lease handed to nobody (its future was cancelled meanwhile). */
    void giveBack(Lease l) {
        if (!l.released && !l.unlocking) {
            l.unlocking = true;
            l.setEnded();
            released(l);
            internal("UNLOCK", l.name, l.token, true);
        }
    }

    // ---- turns ---------------------------------------------------------------------------

    Ticket takeTurn(String name) {
        Ticket t = new Ticket(name);
        ArrayDeque<Ticket> dq = turns.computeIfAbsent(name, k -> new ArrayDeque<>());
        dq.addLast(t);
        if (dq.size() == 1) t.head = true;
        return t;
    }

    /** Whether this client holds a live lease of name (its turn on the name). */
    boolean holdsLive(String name) {
        for (Lease l : leases) if (l.name.equals(name) && l.live()) return true;
        return false;
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
            boolean all = true; // a multi-lock goes once it has every turn
            if (q != null && q.tickets != null) for (Ticket x : q.tickets) all &= x.head;
            if (q != null && all && !q.finished) {
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
        boolean broken = brokenBy != null && !brokenBy.isEmpty();
        l.setLost(new LeaseLostException(null, null, Lease.lossText(l.name, l.token, broken ? "broken by " : msg,
                broken ? brokenBy : ""), why, broken ? brokenBy : null));
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
    double tick(double now) {
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

    void rewatch() {
        Set<String> seen = new HashSet<>();
        for (Watch x : watches) {
            if (!x.active) continue;
            for (String p : x.patterns) if (seen.add(p)) internal("REWATCH", p, 0, false);
        }
    }
}
