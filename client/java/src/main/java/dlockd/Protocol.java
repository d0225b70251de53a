package dlockd;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;

/**
 * The connection's life and what the server says, after the Go client's core.go (its connections, input, events and
 * replies): the middle of {@link Engine} ({@code Core <- Protocol <- Engine}, one object).
 *
 * <p>Owns: the fail-over and handshake state (which server to try next and when, standby and cluster refusals, what
 * HELLO said: the default TTL, whether the client was ever ready or met a fatal refusal) and the input state (a reply
 * body being read, a reply no server may send); and the code over it: a connection that is up ({@link #connected}),
 * failed or lost (fail-over, keeping requests over a drop), the session once HELLO is answered, and every line read:
 * events ({@code * GRANTED}, {@code * EXPIRED}, ...) and the replies to each request.
 *
 * <p>Threads: everything here runs under the client's lock (see {@link Engine}) and its fields are guarded by it;
 * {@link Engine} calls {@link #connected}, {@link #connectFailed}, {@link #connectionLost} and
 * {@link #lineIn}. It never blocks on the network. What it needs from the threads is {@link #signalReady}.
 */
abstract sealed class Protocol extends Core permits Engine {
    static final double BACKOFF_MIN_MS = 50, BACKOFF_MAX_MS = 1000, REDIRECT_MS = 100;
    static final double RENEW_RETRY_MIN_MS = 10;
    static final int ALREADY_WAITING_RETRIES = 3;

    // guarded by the client's lock
    double defaultTTL = Wire.DEFAULT_TTL_MS; // the server's, said in HELLO
    boolean ready; // a session was had once (build() returns the client)
    DlockException fatal; // a refusal that ends build() at once
    Req bodyReq; // the request whose reply body is being read
    int bodyLeft; // its lines still to come
    int naddrs; // cfg.addrs.size(), changed by Engine.setServers
    int hint = -1; // the index of the active a standby or a BYE named (-1: none)
    int failedI = -1; // the server that failed last
    boolean standby; // this connection's server is not the active of our cluster
    double reconnectAt;
    double backoff = BACKOFF_MIN_MS;
    boolean descRefused; // the server refused DESCRIBE: not asked again
    int clusterRefused; // servers one after the other that named another cluster
    String clusterWhy = "";
    boolean insane; // the line just handled is one no server may send: drop the connection
    int crossedGrants; // grants that crossed the CANCEL of a wait given up, given back (for tests)
    double sessionAt; // when HELLO was answered OK on this connection
    boolean answered; // a request other than the handshake was answered on this connection
    long bodyBytes; // the bytes of the body being read
    static final long BODY_BYTES_MAX = 4L << 20; // a reply body larger than this is a protocol error
    static final double SESSION_OK_MS = 1000; // a session that lasted this long resets the reconnect backoff
    static final int UNLOCK_HELD_MARGIN = 2; // resends of a last UNLOCK answered HELD beyond the holds we may have made

    Protocol(Config cfg) {
        super(cfg);
        this.naddrs = cfg.addrs.size();
    }

    /** Tells build() that the client is ready, or failed for good ({@link #fatal}). */
    abstract void signalReady();

    /**
     * The renewal of live lease l was answered m ({@code NO MOVED}: its slot moved to another partition): has the
     * client's {@link Follower} re-home it, on a thread of its own; l is not renewed here meanwhile. False when the
     * client cannot follow (no follower).
     */
    abstract boolean followLease(Lease l, MovedException m);

    /**
     * An UNLOCK nobody waits for (q: given up by its caller, or the client's own) was answered m: sends it on to the
     * partition m names, on a thread of the follower's. False when the client cannot follow.
     */
    abstract boolean forwardUnlock(Req q, MovedException m);

    /**
     * Lease l, moved here from another partition's client ({@link Lease#move}), is this client's from now: it takes a
     * turn on its name and is renewed at once (a little later after more than {@value Router#MAX_REDIRECTS}
     * {@code MOVED} in a row).
     */
    void takeIn(Lease l, double now) {
        leases.add(l);
        l.ticket = takeTurn(l.name);
        l.moving = false;
        l.refreshing = false;
        if (l.live() && l.renew) {
            l.renewAt = l.moves > Router.MAX_REDIRECTS ? now + Math.max(l.ttl / 10, RENEW_RETRY_MIN_MS) : now;
        }
        l.setDeadline(l.deadlineM, l.atRiskM); // this client's manager looks after it now
    }

    // ---- connections ---------------------------------------------------------------------

    void connectFailed(double now, String why, boolean isFatal) {
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
    void connected(double now) {
        state = St.UP;
        sessionOK = false;
        takesReq = false; // until this connection's HELLO says its version
        dropWanted = false;
        double t = connectTimeoutMs();
        if (!ready && naddrs > 1) t /= naddrs;
        helloBy = now + t;
        out.setLength(0);
        crossing = 0;
        answered = false;
        if (!cfg.password.isEmpty()) internal("AUTH", "", 0, false);
        internal("HELLO", "", 0, false);
    }

    /** HELLO was answered OK: describe, confirm the leases within their deadline, send what was kept, watch again. */
    private void session(double now) {
        if (cfg.describe && !descRefused) internal("DESCRIBE", "", 0, false);
        for (Lease l : new ArrayList<>(leases)) {
            if (l.live() && !l.moving && l.deadlineM > now) renewLease(l, now);
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

    void connectionLost(double now) {
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
        if (sessionOK && !standby) {
            if (answered || now - sessionAt >= SESSION_OK_MS) {
                backoff = BACKOFF_MIN_MS; // a session that worked: reconnect at once
            } else {
                // HELLO answered, then nothing that worked (a bad line, a close): no storm of reconnects
                reconnectAt = now + backoff;
                backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
            }
        }
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
            Lease l = q.lease;
            if ((q.op.equals("RENEW") || q.op.equals("RECLAIM")) && l != null && l.c == this && !l.moving) l.refreshing = false;
            return q.op.equals("UNLOCK") && q.lastHold;
        }
        if (q.abandoned || q.finished) {
            if (q.op.equals("UNLOCK") && q.lastHold) {
                q.internal = true; // still release it
                return true;
            }
            if (q.op.equals("CONFIRM") && q.token != 0 && !liveLease(q.name, q.token)) {
                // a grant given up while its confirmation was in flight: the hold is ours, give it back once connected
                q.op = "UNLOCK";
                q.internal = true;
                q.lastHold = true;
                q.lease = null;
                q.ttl = 0;
                q.retries = 0;
                q.body = null;
                q.resent = true;
                return true;
            }
            finish(q, DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed"), null);
            return false;
        }
        if (q.op.equals("MCONFIRM") && q.parent.finished) {
            // the confirmation of a grant whose multi-lock was given up: the lease is ours, give it back once connected
            q.op = "UNLOCK";
            q.internal = true;
            q.lastHold = true;
            q.ttl = 0;
            q.resent = true;
            return true;
        }
        if (q.op.equals("MAP")) {
            // asked once per session: whoever asked asks the next one if it still wants to know
            finish(q, DlockException.of(DlockException.Kind.CONNECTION_LOST, "the connection closed before MAP was answered"), null);
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

    private boolean liveLease(String name, long token) {
        for (Lease l : leases) if (l.name.equals(name) && l.token == token && l.live()) return true;
        return false;
    }

    private void die(DlockException err) {
        state = St.DEAD;
        for (Req q : new ArrayList<>(unsent)) finish(q, err, null);
        unsent = new ArrayList<>();
    }

    // ---- input ---------------------------------------------------------------------------

    /** Handles one line; false when the connection must be dropped. */
    boolean lineIn(String s, double now) {
        Req bq = bodyReq;
        if (bq != null) {
            bodyBytes += s.length() + 1;
            if (bodyBytes > BODY_BYTES_MAX) {
                bodyReq = null;
                lastError = here() + ": a reply body larger than " + BODY_BYTES_MAX + " bytes";
                finish(bq, DlockException.of(DlockException.Kind.PROTOCOL, "a reply body larger than the protocol allows"), null);
                return false;
            }
            bq.body.add(s);
            if (--bodyLeft == 0) {
                bodyReq = null;
                if (bq.op.equals("LOCK") || bq.op.equals("LOCKED")) lockedDone(bq, now);
                else bodyDone(bq);
                if (insane) {
                    insane = false;
                    return false;
                }
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
        if (!r.tag.isEmpty() && (q == null || !r.tag.equals(q.tag))) {
            // not the next reply: the end of a wait (a LOCK that waited on a name whose slot moved meanwhile is
            // answered NO MOVED then), or nothing
            return waitReply(r);
        }
        if (q == null) return false; // a reply to nothing
        if (standbyReply(q, r) || clusterReply(q, r)) return false;
        fifo.pollFirst();
        q.where = Where.NOWHERE;
        if (!q.op.equals("HELLO") && !q.op.equals("AUTH") && !q.op.equals("DESCRIBE")) answered = true;
        reply(q, r, now);
        if (insane) {
            insane = false;
            return false;
        }
        return true;
    }

    /**
     * A reply (not an event) tagged as a LOCK waiting at the server: the wait's end. A daemon whose slot moved to
     * another partition answers its waits {@code NO MOVED} (their place waits at the receiver for the same owner's
     * LOCK): the call fails with {@link MovedException}, which its router follows (the same request id, what is left of
     * the wait). A {@code NO MOVED} of a wait given up meanwhile is nothing. False when no server may send it.
     */
    private boolean waitReply(Wire.Reply r) {
        Req w = waiting.get(r.tag);
        if (w == null) {
            // a wait given up, its CANCEL on the way: no grant of it will cross the CANCEL now
            if (!r.is("NO", "MOVED") || crossing == 0) return false;
            crossing--;
            return true;
        }
        if (r.kind.equals("OK")) return false;
        waiting.remove(r.tag);
        w.where = Where.NOWHERE;
        finish(w, DlockException.ofReply(r), null);
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
                if (multi(q) || notOf(q, r)) {
                    insane = true;
                    finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                    return;
                }
                if (heldElsewhere(q, token, holds)) return;
                // The TTL began when the server granted it, before this line reached us: confirm, count from then.
                q.token = token;
                q.op = "CONFIRM";
                q.waiters = 0; // a * WAITING for this grant may come before the reply: kept here (event WAITING)
                setReqDeadline(q, now + serverTimeoutMs());
                write(q, now);
                break;
            }
            case "LOCKED": {
                // * LOCKED <first> <n>, then n lines: a multi-lock that waited has every lock
                Long n = r.uarg(1);
                if (n == null || n < 1 || n > Wire.MULTI_MAX) {
                    insane = true;
                    return;
                }
                Req q = r.tag.isEmpty() ? null : waiting.get(r.tag);
                if (q == null) {
                    // nobody waits: grants that crossed the CANCEL of a wait given up; read them, and give them back
                    if (crossing == 0) {
                        insane = true;
                        return;
                    }
                    crossing--;
                    crossedGrants++;
                    Req d = new Req("LOCKED", name);
                    d.internal = true;
                    readBody(d, r, n);
                    return;
                }
                waiting.remove(r.tag);
                if (!multi(q) || !q.name.equals(name) || n != q.names.size()) {
                    insane = true;
                    finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                    return;
                }
                q.where = Where.SENT;
                readBody(q, r, n);
                break;
            }
            case "FAILED": {
                // * FAILED <first> <WORD> <rest...>: a multi-lock that waited ended without its locks, nothing held
                Req q = waiting.get(r.tag);
                if (r.tag.isEmpty() || q == null) return;
                waiting.remove(r.tag);
                if (!multi(q) || !q.name.equals(name) || r.args.size() < 2) {
                    insane = true;
                    finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may end this wait so: " + r.text()), null);
                    return;
                }
                finish(q, DlockException.ofFailed(r), null);
                break;
            }
            case "MOVED": {
                // * MOVED <name> <partition> <host:port,...>|- <map-epoch>: the slot of a name this LOCK waited for
                // moved to another partition (its place waits there for the same owner): sent on there, as a MOVED
                // reply is (the same request id, what is left of the wait)
                Req q = r.tag.isEmpty() ? null : waiting.get(r.tag);
                if (q == null) {
                    if (crossing > 0) crossing--; // a wait given up, its CANCEL on the way: no grant of it will come
                    return;
                }
                waiting.remove(r.tag);
                q.where = Where.NOWHERE;
                finish(q, MovedException.of("MOVED", r.text(), r.args.subList(1, r.args.size())), null);
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
            case "WAITING": {
                // * WAITING <name> <n> token=<t>: n requests wait for a lease that asked (LOCK notify=waiters)
                Long n = r.uarg(1);
                Long token = Wire.parseU64(r.kv("token"));
                if (n == null || n == 0 || token == null || token == 0) return;
                int w = n < 0 || n > Integer.MAX_VALUE ? Integer.MAX_VALUE : (int) (long) n;
                boolean found = false;
                for (Lease l : leases) {
                    if (l.name.equals(name) && l.token == token) {
                        found = true;
                        if (l.live()) l.setWaiting(w);
                    }
                }
                if (found) return;
                // a waiter's grant: the server tells right after its * GRANTED, before the CONFIRM is answered and
                // the lease made; keep the count on the CONFIRM for the lease (granted). One for a lease we do not
                // hold (given back meanwhile) is nothing.
                for (Req q : fifo) {
                    if (q.op.equals("CONFIRM") && q.token == token && q.name.equals(name)) q.waiters = w;
                }
                break;
            }
            case "WATCH": {
                if (r.args.size() < 4) return;
                WatchEvent ev = new WatchEvent(WatchEvent.kindOf(r.args.get(1)), name, r.args.get(2), r.kvs("user"),
                        Wire.atou(r.args.get(3)), Wire.atoi(r.kvs("holders")), r.kvs("broken_by"), 0,
                        Wire.valueDecode(r.kv("value")));
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
            case "MCONFIRM":
                handled = rMConfirm(q, r);
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
            case "HOLDERS": case "MAP":
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

    /** Whether q is a multi-lock of several names (LOCK a b ...). */
    static boolean multi(Req q) {
        return q.names != null && q.names.size() > 1;
    }

    private boolean rLock(Req q, Wire.Reply r, double now) {
        if (r.is("OK", "LOCKED")) {
            // OK LOCKED <first> <n>, then n lines: a multi-lock granted at once
            Long n = r.uarg(1);
            if (!multi(q) || !q.name.equals(r.arg(0)) || n == null || n != q.names.size()) {
                insane = true;
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                return true;
            }
            q.where = Where.SENT;
            readBody(q, r, n);
        } else if (r.is("OK", "GRANTED")) {
            Long token = r.uarg(1);
            Long ms = r.uarg(2);
            if (multi(q) || notOf(q, r) || token == null || token == 0) {
                insane = true;
                if (multi(q) && token != null && token != 0) cleanupGrant(r.arg(0), token);
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                return true;
            }
            if (heldElsewhere(q, token, holdsOf(r))) return true;
            // any reentry (holds 2 or more) keeps the longer: its other hold may be one this client gave up and is
            // giving back (a wait cancelled, then a LOCK with a shorter TTL); counted with the TTL asked, the lease
            // never counts on more than that, whatever a server says
            if (ms != null && holdsOf(r) >= 2 && ms > mostTTL(q, token)) ms = (long) mostTTL(q, token);
            if (ms == null || ms < 0 || ms > mostTTL(q, token)) {
                insane = true;
                cleanupGrant(q.name, token);
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + r.text()), null);
                return true;
            }
            granted(q, token, ms, q.sentAt, r);
        } else if (r.is("OK", "QUEUED") && q.wait == 0) {
            insane = true; // a TRYLOCK never waits
            finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may queue a TRYLOCK: " + r.text()), null);
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
                q.reqId = DlockClient.requestId(); // a new request (see below)
                write(q, now);
            } else {
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "the grant expired before it was confirmed"), null);
            }
        } else if (r.is("NO", "MOVED")) {
            // granted, then its slot moved (the lease with it): the acquire is sent on, with its request id, and the
            // receiver answers it with this grant
            finish(q, DlockException.ofReply(r), null);
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
        // Engine is the one subclass (sealed)
        Lease l = new Lease((Engine) this, q.name, token, mode, Math.max(q.limit, 1));
        l.noteProof(r);
        l.ttl = q.ttl;
        l.renew = q.renew;
        l.lockWrites = Math.max(q.lockWrites, 1);
        l.value = q.value;
        confirmLease(l, q, sentAt, ms);
        double now = nowMs();
        if (now >= l.deadlineM - guardMs(l.ttl)) {
            // The reply came so late that the lease is inside its lost guard: give it back; ask again while the wait lasts.
            cleanupGrant(q.name, token);
            if (q.wait < 0 || (q.wait > 0 && q.waitEnd > now)) {
                q.op = "LOCK";
                // a new request, with an id of its own: the grant given back must not be found as its own
                q.reqId = DlockClient.requestId();
                setReqDeadline(q, now + serverTimeoutMs());
                write(q, now);
            } else {
                finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "granted too late to be used"), null);
            }
            return;
        }
        l.ticket = q.ticket;
        if (q.tickets != null) {
            l.ticket = q.tickets.get(0); // lockAll of one name: an ordinary LOCK, its lease handed out as Leases
            q.tickets = null;
        }
        leases.add(l);
        if (q.op.equals("CONFIRM") && q.waiters > 0) l.setWaiting(q.waiters); // told while its grant was confirmed
        finish(q, null, q.names != null ? new Leases(List.of(l)) : l);
    }

    // ---- multi-locks (LOCK a b ...) ---------------------------------------------------------

    /** Reads the n lines after header r (OK LOCKED, * LOCKED) into q's body. */
    private void readBody(Req q, Wire.Reply r, long n) {
        q.header = r;
        q.body = new ArrayList<>();
        bodyReq = q;
        bodyLeft = (int) n;
        bodyBytes = 0;
    }

    /**
     * The n lines of an OK LOCKED (a reply) or a * LOCKED (an event) are read: each must grant q's name of its place
     * (byte order) a new lease within the TTL asked. A reply's leases count from the LOCK's write; an event's are
     * confirmed first (REFRESH each, as a single * GRANTED is), then handed out. Grants nobody wants are given back.
     */
    private void lockedDone(Req q, double now) {
        List<Grant> gs = new ArrayList<>();
        boolean bad = false;
        for (int i = 0; i < q.body.size(); i++) {
            List<String> f = Wire.fields(q.body.get(i));
            Wire.Reply g = f.size() >= 4 && f.get(0).equals("granted")
                    ? new Wire.Reply("OK", "GRANTED", new ArrayList<>(f.subList(1, f.size())), "") : null;
            Long token = g == null ? null : g.uarg(1);
            Long ms = g == null ? null : g.uarg(2);
            if (g == null || token == null || token == 0) {
                bad = true;
                continue;
            }
            gs.add(new Grant(g.arg(0), token, ms == null ? -1 : ms, g));
            if (q.names == null) continue; // crossed a CANCEL: given back below
            if (!g.arg(0).equals(q.names.get(i)) || ms == null || ms > q.ttl || (g.kv("holds") != null && holdsOf(g) != 1)) {
                bad = true;
            }
        }
        if (q.op.equals("LOCKED")) {
            for (Grant g : gs) cleanupGrant(g.name, g.token);
            return;
        }
        if (bad || gs.size() != q.names.size()) {
            insane = true;
            for (Grant g : gs) cleanupGrant(g.name, g.token);
            finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may grant this: " + q.header.text()), null);
            return;
        }
        if (q.abandoned || q.finished) {
            for (Grant g : gs) cleanupGrant(g.name, g.token);
            finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "given up"), null);
            return;
        }
        if (q.header.kind.equals("OK")) {
            for (Grant g : gs) g.sentAt = q.sentAt;
            multiGranted(q, gs, now);
            return;
        }
        // The TTLs began when the server granted them, before the event reached us: confirm each, count from then.
        q.where = Where.NOWHERE;
        q.grants = gs;
        q.pending = gs.size();
        setReqDeadline(q, now + serverTimeoutMs());
        for (Grant g : gs) {
            Req c = new Req("MCONFIRM", g.name);
            c.token = g.token;
            c.ttl = q.ttl;
            c.parent = q;
            c.grant = g;
            write(c, now);
        }
    }

    /** The confirmation of one lease of a multi-lock granted by an event; the last one decides. */
    private boolean rMConfirm(Req c, Wire.Reply r) {
        Grant g = c.grant;
        if (r.is("OK", "REFRESHED")) {
            Long ms = r.uarg(1);
            if (!c.name.equals(r.arg(0)) || ms == null || ms > c.ttl) {
                insane = true;
                g.err = DlockException.of(DlockException.Kind.PROTOCOL, "no server may confirm this: " + r.text());
            } else {
                g.ms = ms;
                g.sentAt = c.sentAt;
                g.confirm = r;
            }
        } else if (r.is("NO", "NOT_HOLDER")) {
            g.expired = true;
        } else {
            g.err = DlockException.ofReply(r);
        }
        finish(c, null, null);
        Req p = c.parent;
        if (--p.pending == 0) confirmedAll(p, nowMs());
        return true;
    }

    private void confirmedAll(Req q, double now) {
        List<Grant> gs = q.grants;
        q.grants = null;
        if (gs == null) return;
        DlockException err = null;
        boolean expired = false;
        for (Grant g : gs) {
            if (g.expired) expired = true;
            else if (g.err != null && err == null) err = g.err;
        }
        if (!q.finished && err == null && !expired) {
            multiGranted(q, gs, now);
            return;
        }
        // granted, then their slot moved (the leases with it): kept for the acquire sent on with its request id
        boolean moved = err instanceof MovedException;
        for (Grant g : gs) if (!g.expired && !(moved && !q.finished)) cleanupGrant(g.name, g.token);
        if (q.finished) return;
        if (err != null) finish(q, err, null);
        else relock(q, now, "a grant expired before it was confirmed");
    }

    /** The grants given back, asks again while the wait lasts: a new request, whose id finds nothing of the old one. */
    private void relock(Req q, double now, String why) {
        if (q.wait < 0 || (q.wait > 0 && q.waitEnd > now)) {
            q.reqId = DlockClient.requestId();
            setReqDeadline(q, now + serverTimeoutMs());
            write(q, now);
        } else {
            finish(q, DlockException.of(DlockException.Kind.TIMEOUT, why), null);
        }
    }

    /** Hands out the leases of a multi-lock, each confirmed for g.ms from g.sentAt. */
    private void multiGranted(Req q, List<Grant> gs, double now) {
        if (q.abandoned || q.finished) {
            for (Grant g : gs) cleanupGrant(g.name, g.token);
            finish(q, DlockException.of(DlockException.Kind.TIMEOUT, "given up"), null);
            return;
        }
        List<Lease> ls = new ArrayList<>();
        boolean late = false;
        for (Grant g : gs) {
            Lease l = new Lease((Engine) this, g.name, g.token, Lease.Mode.EXCLUSIVE, 1);
            l.noteProof(g.line);
            if (g.confirm != null) l.noteProof(g.confirm);
            l.ttl = q.ttl;
            l.renew = q.renew;
            l.lockWrites = Math.max(q.lockWrites, 1);
            confirmLease(l, q, g.sentAt, g.ms);
            if (now >= l.deadlineM - guardMs(l.ttl)) late = true;
            ls.add(l);
        }
        if (late) {
            // so late that a lease is inside its lost guard: give them all back; ask again while the wait lasts
            for (Grant g : gs) cleanupGrant(g.name, g.token);
            relock(q, now, "granted too late to be used");
            return;
        }
        for (int i = 0; i < ls.size(); i++) {
            ls.get(i).ticket = q.tickets.get(i);
            leases.add(ls.get(i));
        }
        q.tickets = null;
        finish(q, null, new Leases(List.copyOf(ls)));
    }

    private boolean rUnlock(Req q, Wire.Reply r, double now) {
        Lease l = q.lease;
        boolean caller = !q.internal && !q.abandoned && q.lastHold && l != null && l.c == this;
        if (r.is("NO", "MOVED")) {
            MovedException m = (MovedException) DlockException.ofReply(r);
            if (caller) {
                // the lease's slot moved: its caller follows it there (Lease.awaitUnlock) and sends it again
                q.hook = null;
                finish(q, m, null);
                return true;
            }
            if ((q.internal || q.abandoned) && q.moves < Router.MAX_REDIRECTS && forwardUnlock(q, m)) {
                finish(q, null, null);
                return true;
            }
            return false;
        }
        if (caller && r.is("ERR", "UNAVAILABLE") && Lease.moveUnderWay(DlockException.ofReply(r))) {
            q.hook = null; // for a moment: its caller sends it again (Lease.awaitUnlock)
            finish(q, DlockException.ofReply(r), null);
            return true;
        }
        boolean quiet = true;
        ArrayDeque<Ticket> dq = turns.get(q.name);
        if (dq != null && !dq.isEmpty() && (l == null || l.ticket != dq.peekFirst())) quiet = false;
        // at most the holds this client may have made (each write of its LOCK one), and a margin
        int most = (l != null ? l.lockWrites - 1 : 0) + UNLOCK_HELD_MARGIN;
        if (r.is("OK", "HELD") && q.lastHold && quiet && q.retries < Math.min(most, Wire.REENTRY_MAX)) {
            // holds we lost track of (a LOCK sent again after a reconnect was granted twice): give them back
            q.retries++;
            write(q, now);
        } else if (r.is("OK", "HELD") && q.lastHold && quiet) {
            // still held after every hold we may have made was given back: the server's count is not ours to trust
            finish(q, new UnconfirmedException(q.name + ": still held after " + (q.retries + 1)
                    + " UNLOCKs; the lock ends by its TTL at the latest"), null);
        } else if (r.kind.equals("OK") && (r.word.equals("RELEASED") || r.word.equals("HELD"))) {
            finish(q, null, null);
        } else if (r.is("NO", "NOT_HOLDER")) {
            // released before the drop; or, giving back holds we lost track of, by another
            // client of our owner giving back its own first (a race: gone, as asked)
            if (q.lastHold && (q.resent || q.retries > 0)) finish(q, null, null);
            else finish(q, DlockException.ofReply(r), null);
        } else {
            return false;
        }
        return true;
    }

    private boolean rRefresh(Req q, Wire.Reply r, double now) {
        Lease l = q.lease;
        if (l.c != this) {
            // the lease moved to another partition's client since: this one's answers are not its any more
            if (q.internal) {
                finish(q, null, null);
                return true;
            }
            if (r.is("OK", "REFRESHED")) {
                finish(q, null, r.uarg(1));
                return true;
            }
            return false;
        }
        if (q.op.equals("RENEW") || q.op.equals("RECLAIM")) l.refreshing = false;
        if (r.is("NO", "MOVED") && (q.op.equals("RENEW") || q.op.equals("RECLAIM")) && l.live()
                && followLease(l, (MovedException) DlockException.ofReply(r))) {
            // its slot moved to another partition, the lease with it: re-homed there, and renewed there at once
            finish(q, null, null);
            return true;
        }
        if (r.kind.equals("OK") && (r.word.equals("REFRESHED") || r.word.equals("RECLAIMED"))) {
            Long ms = r.uarg(r.word.equals("RECLAIMED") ? 2 : 1);
            if (ms == null || ms > q.ttl) {
                insane = true;
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "no server may refresh so: " + r.text()), null);
                return true;
            }
            if (q.op.equals("REFRESH") && !q.value.isEmpty()) l.value = q.value; // a proclaim: the server has it
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
            wakeAt(l.renewAt);
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
        takesReq = Wire.takesReq(r.kv("version")); // decided per connection: the next server may be older
        failedI = -1;
        sessionOK = true;
        sessionAt = now;
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
            bodyBytes = 0;
            q.where = Where.SENT;
        }
        return true;
    }

    private void bodyDone(Req q) {
        if (q.op.equals("MAP")) {
            PartitionMap m;
            try {
                m = PartitionMap.parse(q.header, q.body);
            } catch (IllegalArgumentException e) {
                finish(q, DlockException.of(DlockException.Kind.PROTOCOL, "not a partition map: " + e.getMessage()), null);
                return;
            }
            finish(q, null, m);
            return;
        }
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
