package dlockd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.IntConsumer;

/**
 * One hold of a lock, granted by {@link DlockClient#lock}. Close it (try-with-resources) to release it.
 *
 * <p><b>Renewal and the local deadline.</b> Unless taken with {@link LockOptions#noRenew()}, the client renews the
 * lease in the background every third of its TTL. It keeps a <em>local deadline</em> for it, counted from the moment
 * the request that granted or last confirmed it was <em>sent</em> (never from when the reply came), so that it never
 * believes in a lease longer than the server does. A renewal not confirmed by half the TTL makes the lease
 * {@linkplain #atRisk() at risk}.
 *
 * <p><b>Lost.</b> A lease is lost when the server ended it ({@code * EXPIRED}, or a {@code BREAK}), refused a renewal
 * ({@code NOT_HOLDER}), or it could not be confirmed before its local deadline less a guard (max(TTL/10, 20 ms) by
 * default). The loss is reported at once, on a client thread, before that local deadline -- so before the server
 * could grant the lock to anyone else: {@link #onLost} listeners run, {@link #lost()} completes. Closing the client
 * loses its leases too ({@link LostReason#CLIENT_CLOSED}), but does not release them at the server: they end there by
 * their TTL.
 *
 * <p><b>Others waiting.</b> A lease taken with {@link LockOptions#notifyWaiters()} is told by the server how many
 * requests wait for its lock ({@code * WAITING}): {@link #onContended} listeners run, {@link #waiters()} says the
 * count. A holder that can let go early does so.
 *
 * <p><b>Elections.</b> A lease taken with {@link LockOptions#value(String)} says that value to whoever looks at its
 * lock ({@link Status#value()}, {@link WatchEvent#value()}): held on an election's lock, it is the leadership, and
 * {@link #token()} the term. {@link #proclaim} says another value; {@link #unlock()} resigns.
 *
 * <p><b>Partitions.</b> On a partitioned service a lease is served by the partition of its name's slot. When an
 * operator moves that slot to another partition ({@code PARTITION MOVE}) while the lease is held, the lease goes along:
 * same token, same owner, its TTL counted whole again from the import. The giving daemon then answers
 * {@code NO MOVED} to every request about it; the client re-homes the lease onto its connection to the receiving
 * partition (made if need be) and sends the request there again, so that the renewals, {@link #refresh},
 * {@link #proclaim}, {@link #check} and {@link #unlock} go there from then on. Meanwhile (a move takes a few
 * milliseconds, longer while the giver's Redis is down) the daemons answer {@code ERR UNAVAILABLE slot <s> is moving
 * ...} or {@code ... is arriving ...}: the background renewal retries as for any {@code UNAVAILABLE} (the lease may turn
 * {@linkplain #atRisk() at risk}, it is not lost), and a {@code refresh}, {@code proclaim}, {@code check} or
 * {@code unlock} is sent again until the server timeout, then throws {@link UnavailableException}. A lease is lost
 * only as always: {@code NOT_HOLDER}, or its local deadline passed without a confirmed renewal. More than 3
 * {@code MOVED} in a row for one call throw {@link MovedException}.
 *
 * <p><b>Before acting</b> on what the lock protects, call {@link #isValid()} (it reads the clock itself, so it turns
 * false in time even if no client thread ran) and pass {@link #token()} along to the resource.
 *
 * <p>Thread-safe.
 */
public final class Lease implements AutoCloseable {
    /** How the lease holds its lock. */
    public enum Mode {
        /** Alone (a mutex, or a writer). */
        EXCLUSIVE,
        /** With other shared holders (a reader). */
        SHARED,
        /** One of the lock's permits. */
        SEMAPHORE
    }

    /**
     * The client (a partition's leg) that serves the lease: written under that engine's lock when the lease moves to
     * another one ({@link #move}); the fields below are guarded by the lock of the engine it is on.
     */
    volatile Engine c;
    final String name;
    final long token;
    final Mode mode;
    final int limit;

    // guarded by the client's lock (Engine.mu)
    double ttl;
    double deadlineM;
    double renewAt;
    boolean renew;
    boolean refreshing;
    boolean unlocking;
    boolean released;
    boolean atRiskM;
    LostReason lostM = LostReason.NOT_LOST;
    String proof = "";
    long until;
    Engine.Ticket ticket;
    double lostAtM;
    int lockWrites = 1; // how often its LOCK was written: the holds it may have made (bounds UNLOCK's resends)
    String value = ""; // its value as sent (LOCK value=, then each proclaim the server took): a RECLAIM says it
    boolean moving; // its renewal was answered MOVED and it is being re-homed: not renewed here meanwhile
    int moves; // MOVED answers to its renewals since one was last confirmed

    // the public view, under mu
    private final ReentrantLock mu = new ReentrantLock();
    private LeaseLostException err;
    private boolean atRisk;
    private boolean riskTold;
    private double deadline;
    private double lostAt;
    private boolean ended;
    private final List<Consumer<LeaseLostException>> lostListeners = new ArrayList<>();
    private final List<Consumer<Lease>> riskListeners = new ArrayList<>();
    private final List<IntConsumer> contendedListeners = new ArrayList<>();
    private int waiters; // what the server last said waits for the lease (* WAITING), 0 before
    private final CompletableFuture<LeaseLostException> lostF = new CompletableFuture<>();

    Lease(Engine c, String name, long token, Mode mode, int limit) {
        this.c = c;
        this.name = name;
        this.token = token;
        this.mode = mode;
        this.limit = limit;
    }

    boolean live() {
        return lostM == LostReason.NOT_LOST && !released && !unlocking;
    }

    void noteProof(Wire.Reply r) {
        String p = r.kvs("proof"), u = r.kvs("until");
        if (p.length() == 32 && !u.isEmpty()) {
            long n = Wire.atou(u);
            if (n > 0) {
                proof = p;
                until = n;
            }
        }
    }

    /** Sets the local deadline (the guard is the lease's TTL's: set ttl first). */
    void setDeadline(double d, boolean risk) {
        deadlineM = d;
        lostAtM = d - c.guardMs(ttl);
        c.wakeAt(renew ? Math.min(lostAtM, renewAt) : lostAtM);
        boolean tell = false;
        List<Consumer<Lease>> ls = null;
        mu.lock();
        try {
            deadline = d;
            atRisk = risk;
            lostAt = lostAtM;
            if (!risk) {
                riskTold = false;
            } else if (!riskTold && err == null && !ended) {
                riskTold = true;
                tell = true;
                ls = new ArrayList<>(riskListeners);
            }
        } finally {
            mu.unlock();
        }
        if (tell) {
            List<Consumer<Lease>> fls = ls;
            c.callback(() -> {
                for (Consumer<Lease> x : fls) x.accept(this);
                if (c.cfg.onAtRisk != null) c.cfg.onAtRisk.accept(this);
            });
        }
    }

    /**
     * The server said that n requests wait for the lease (* WAITING): records it and tells the listeners, in the
     * order the news came (queued while mu is held, run on the callback thread without any lock of the client).
     */
    void setWaiting(int n) {
        mu.lock();
        try {
            if (err != null || ended) return;
            waiters = n;
            List<IntConsumer> ls = new ArrayList<>(contendedListeners);
            c.callback(() -> {
                for (IntConsumer x : ls) x.accept(n);
                if (c.cfg.onContended != null) c.cfg.onContended.accept(this, n);
            });
        } finally {
            mu.unlock();
        }
    }

    void setEnded() {
        mu.lock();
        ended = true;
        mu.unlock();
    }

    /** Records why the lease was lost (an unconfirmed loss seen first is kept) and tells the listeners. */
    void setLost(LeaseLostException e) {
        LeaseLostException told;
        List<Consumer<LeaseLostException>> ls;
        mu.lock();
        try {
            if (err == null) err = e;
            told = err;
            ls = new ArrayList<>(lostListeners);
            lostListeners.clear();
        } finally {
            mu.unlock();
        }
        c.callback(() -> {
            lostF.complete(told);
            for (Consumer<LeaseLostException> x : ls) x.accept(told);
            if (c.cfg.onLost != null) c.cfg.onLost.accept(this, told);
        });
    }

    private boolean lostLocked(double now) {
        if (err != null) return true;
        if (!ended && now >= lostAt) {
            err = new LeaseLostException(null, null, lossText(name, token,
                    "it could not be confirmed before its local deadline", ""), LostReason.UNCONFIRMED, null);
            return true;
        }
        return false;
    }

    /**
     * A loss's message: "name (token n): why more". With a StringBuilder, not +: a string concatenation's first run
     * links its call site (invokedynamic), which takes milliseconds (tens on a loaded machine), and the first loss of
     * a JVM must still reach its listeners within the guard (20 ms for a short lease).
     */
    static String lossText(String name, long token, String why, String more) {
        return new StringBuilder(name).append(" (token ").append(Wire.u64(token)).append("): ").append(why).append(more)
                .toString();
    }

    /** @return the lock's name */
    public String name() {
        return name;
    }

    /**
     * The fencing token: larger than every token granted before it, for any lock. It is an unsigned 64-bit number on
     * the wire; servers make it {@code unix_ms * 10^6 + sequence}, which fits a positive {@code long} until the year
     * 2262. Compare tokens with {@link Long#compareUnsigned} and print them with {@link Long#toUnsignedString} to be
     * exact for any value.
     *
     * @return the lease's fencing token
     */
    public long token() {
        return token;
    }

    /** @return how the lease holds its lock */
    public Mode mode() {
        return mode;
    }

    /**
     * True while the lease is held: not lost, not released, and the clock before its local deadline less the guard.
     * Check it right before acting on the protected resource: it does not depend on any client thread having run.
     *
     * @return whether the lease may be acted on now
     */
    public boolean isValid() {
        mu.lock();
        try {
            return !ended && !lostLocked(Engine.nowMs());
        } finally {
            mu.unlock();
        }
    }

    /**
     * True while a renewal is overdue (not confirmed by half the TTL: the server or network is slow or gone, or the
     * server answered UNAVAILABLE) or the server warned that the lease is about to end; false again once a renewal is
     * confirmed.
     *
     * @return whether the lease is at risk
     */
    public boolean atRisk() {
        mu.lock();
        try {
            return atRisk && !lostLocked(Engine.nowMs());
        } finally {
            mu.unlock();
        }
    }

    /**
     * What the client counts of the lease: its local deadline less now (zero once lost or past the deadline less the
     * guard). The server's count is never shorter.
     *
     * @return the time left
     */
    public Duration remaining() {
        mu.lock();
        try {
            if (lostLocked(Engine.nowMs())) return Duration.ZERO;
            double d = deadline - Engine.nowMs();
            return d <= 0 ? Duration.ZERO : Duration.ofNanos((long) (d * 1e6));
        } finally {
            mu.unlock();
        }
    }

    /**
     * @return why the lease was lost; {@link LostReason#NOT_LOST} while held or after a release. Once the local
     *     deadline less the guard has passed it is {@link LostReason#UNCONFIRMED} even if no listener ran yet.
     */
    public LostReason lostReason() {
        LeaseLostException e = lostCause();
        return e == null ? LostReason.NOT_LOST : e.reason();
    }

    /** @return the loss, or null while the lease is held (and after a release: a release is no loss) */
    public LeaseLostException lostCause() {
        mu.lock();
        try {
            return lostLocked(Engine.nowMs()) ? err : null;
        } finally {
            mu.unlock();
        }
    }

    /**
     * A future completed (on a client thread) when the lease is lost -- before its local deadline -- or the client is
     * closed. It is not completed by {@link #unlock()}.
     *
     * @return the loss, to come
     */
    public CompletableFuture<LeaseLostException> lost() {
        return lostF.copy();
    }

    /**
     * Calls the listener, on a client thread, when the lease is lost (at once if it was lost already). Keep it short:
     * listeners of one client run one at a time. Typically it stops the work the lease protects.
     *
     * @param listener receives the loss
     * @return this lease
     */
    public Lease onLost(Consumer<LeaseLostException> listener) {
        LeaseLostException now;
        mu.lock();
        try {
            now = err;
            if (now == null) lostListeners.add(listener);
        } finally {
            mu.unlock();
        }
        if (now != null) c.callback(() -> listener.accept(now));
        return this;
    }

    /**
     * Calls the listener, on a client thread, each time the lease becomes at risk (see {@link #atRisk()}).
     *
     * @param listener receives this lease
     * @return this lease
     */
    public Lease onAtRisk(Consumer<Lease> listener) {
        mu.lock();
        try {
            riskListeners.add(listener);
        } finally {
            mu.unlock();
        }
        return this;
    }

    /**
     * How many requests wait for the lease's lock, as the server last said ({@code * WAITING}; asked with
     * {@link LockOptions#notifyWaiters()}): 0 before it said any. The server says so when the lease is granted while
     * some wait and as the queue grows (when it doubled, or a second later), never when it shrinks: the count is not
     * lowered as waiters leave. For a holder that polls rather than listen.
     *
     * @return the waiters last told of, or 0
     */
    public int waiters() {
        mu.lock();
        try {
            return waiters;
        } finally {
            mu.unlock();
        }
    }

    /**
     * Calls the listener, on a client thread, each time the server says that others wait for the lease (see
     * {@link LockOptions#notifyWaiters()}), with how many requests wait; at once if it said so already (a waiter's
     * grant is told of the requests behind it before the lease is handed out). Keep it short: listeners of one client
     * run one at a time, and never with a lock of the client held. Typically it lets the lock go early.
     *
     * @param listener receives the number of waiting requests (at least 1)
     * @return this lease
     */
    public Lease onContended(IntConsumer listener) {
        mu.lock();
        try {
            contendedListeners.add(listener);
            int n = waiters;
            if (n > 0 && err == null && !ended) c.callback(() -> listener.accept(n));
        } finally {
            mu.unlock();
        }
        return this;
    }

    /**
     * Asks the server whether the token still holds the lock.
     *
     * @throws LeaseLostException (code {@code "STALE"}) if it does not; {@link DlockException#serverLine()} names the
     *     current holder's token
     */
    public void check() {
        send(e -> e.submitCall(now -> {
            if (c != e) throw Rehomed.IT;
            Engine.Req q = new Engine.Req("CHECK", name);
            q.token = token;
            return q;
        }, false));
    }

    /**
     * Extends the lease now to ttl (null: its TTL). A shorter TTL shortens it, counted from the moment the request is
     * sent. Later renewals use that TTL.
     *
     * @param ttl the new TTL, or null
     * @throws LeaseLostException if the lease is gone
     * @throws NotHolderException if it was released
     */
    public void refresh(Duration ttl) {
        if (ttl != null && (ttl.isNegative() || ttl.isZero())) throw new IllegalArgumentException("ttl " + ttl + ": must be positive");
        refresh(ttl, "");
    }

    /**
     * Gives the lease a new value (see {@link LockOptions#value(String)}): an elected leader says where its followers
     * should now go. The lock's watchers are told ({@link WatchEvent.Kind#VALUE}) once the server has it, and
     * {@link DlockClient#status} shows it. The lease is refreshed too, for its TTL, as {@link #refresh} does
     * ({@code REFRESH <name> <token> ttl=<its TTL> value=<text>}). The value is sent as a text value (printable
     * ASCII, a space as {@code %20}, any other byte '?', at most 128 bytes as sent) and kept by the lease.
     *
     * @param value the new value, not empty
     * @throws IllegalArgumentException if the value is null or empty (nothing is sent)
     * @throws LeaseLostException if the lease is gone: the server answered {@code NOT_HOLDER} (the leader lost its
     *     lease, and the lease is lost) or it was lost before
     * @throws NotHolderException if it was released
     */
    public void proclaim(String value) {
        if (value == null || value.isEmpty()) throw new IllegalArgumentException("proclaim: the value is empty");
        refresh(null, Wire.descEncode(value, Wire.VALUE_MAX));
    }

    /** REFRESH, with ttl (null: the lease's TTL) and a new value (encoded; "": none). */
    private void refresh(Duration ttl, String value) {
        send(e -> e.submitCall(now -> {
            if (c != e) throw Rehomed.IT;
            if (lostM != LostReason.NOT_LOST) {
                LeaseLostException x = lostCause();
                throw x != null ? x : DlockException.of(DlockException.Kind.LOST, name + " is lost");
            }
            if (released || unlocking) throw DlockException.of(DlockException.Kind.NOT_HOLDER, "the lease of " + name + " is released");
            Engine.Req q = new Engine.Req("REFRESH", name);
            q.token = token;
            q.ttl = ttl == null ? this.ttl : Wire.durMs(ttl);
            q.value = value;
            q.lease = this;
            return q;
        }, false));
    }

    /**
     * Gives the hold back. Once sent, the UNLOCK is sent again after a reconnect until the server answers it. The lease
     * is not valid from the call on, whatever the outcome.
     *
     * @throws NotHolderException if the server no longer had the lease (it expired or was broken), or it was released
     *     already
     * @throws UnconfirmedException if the server did not answer within the server timeout: the release goes on being
     *     sent, and the lock ends by its TTL at the latest
     */
    public void unlock() {
        awaitUnlock(startUnlock());
    }

    /** An UNLOCK sent: where, its outcome to come, and whether it got as far as making the lease unlocking. */
    static final class Unlock {
        Engine e;
        CompletableFuture<Object> f;
        boolean started;
    }

    /** Sends the UNLOCK (without waiting for its reply: {@link Leases#unlockAll()} sends them all first). */
    Unlock startUnlock() {
        Unlock u = new Unlock();
        u.e = c;
        u.f = sendUnlock(u, u.e);
        return u;
    }

    /**
     * Sends UNLOCK on e: the first that gets as far makes the lease unlocking (u.started); a later one -- after a
     * {@code MOVED}, to where the lease is now -- sends it again.
     */
    private CompletableFuture<Object> sendUnlock(Unlock u, Engine e) {
        return e.submitCall(now -> {
            if (c != e) throw Rehomed.IT;
            if (!u.started) {
                if (released || unlocking) throw DlockException.of(DlockException.Kind.NOT_HOLDER, "the lease of " + name + " is released already");
                unlocking = true;
                u.started = true;
                setEnded();
            } else if (released) {
                throw DlockException.of(DlockException.Kind.NOT_HOLDER, "the lease of " + name + " is released already");
            }
            Engine.Req q = new Engine.Req("UNLOCK", name);
            q.token = token;
            q.lease = this;
            q.lastHold = true;
            q.hook = () -> {
                if (c == e) e.released(this);
            };
            return q;
        }, false);
    }

    /** Waits for the UNLOCK startUnlock sent: the outcome of {@link #unlock()}. */
    void awaitUnlock(Unlock u) {
        try {
            u.e = send(u.e, u.f, e -> sendUnlock(u, e));
        } catch (NotHolderException e) {
            if ("NOT_HOLDER".equals(e.code())) {
                exec(x -> {
                    if (lostM == LostReason.NOT_LOST) x.lose(this, LostReason.REJECTED, "");
                });
            }
            throw e;
        } catch (LockTimeoutException e) {
            throw new UnconfirmedException(name + ": " + e.getMessage());
        } catch (RuntimeException e) {
            // a MOVED or a move under way, followed as far as it could be: given up here, as any other outcome
            if (u.started) {
                exec(x -> {
                    if (!released) x.released(this);
                });
            }
            throw e;
        }
    }

    // ---- following the lease's slot -------------------------------------------------------

    /** Thrown by a request's making when the lease is on another engine by then: it is made there instead. */
    static final class Rehomed extends RuntimeException {
        private static final long serialVersionUID = 1L;
        static final Rehomed IT = new Rehomed();

        private Rehomed() {
            super("the lease moved to another partition's connection", null, false, false);
        }
    }

    /** Sends a request about the lease on its engine (made by send under its lock), and waits for it as below. */
    private Object send(Function<Engine, CompletableFuture<Object>> send) {
        Engine e = c;
        Object[] out = new Object[1];
        sendAndFollow(e, send.apply(e), send, out);
        return out[0];
    }

    /** As {@link #send(Function)}, of a request sent on e already (f); returns the engine that answered. */
    private Engine send(Engine e, CompletableFuture<Object> f, Function<Engine, CompletableFuture<Object>> send) {
        return sendAndFollow(e, f, send, new Object[1]);
    }

    /**
     * Waits for f, a request about the lease sent on e, and follows the lease where the answers send it: a lease that
     * moved to another engine meanwhile has the request made there; a {@code NO MOVED} has the lease re-homed by the
     * engine's {@link Follower} (at most {@value Router#MAX_REDIRECTS} times, then {@link MovedException}) and the
     * request sent there again; an {@code ERR UNAVAILABLE} of a move under way (the giver freezing the slot: "is
     * moving", the receiver importing it: "is arriving") has it sent again a little later, until the server timeout.
     * The result goes to out[0].
     *
     * @return the engine that gave the outcome
     */
    private Engine sendAndFollow(Engine e, CompletableFuture<Object> f, Function<Engine, CompletableFuture<Object>> send,
            Object[] out) {
        int moves = 0;
        Router.Pauses ps = new Router.Pauses(e.serverTimeoutMs());
        while (true) {
            try {
                out[0] = e.await(f);
                return e;
            } catch (Rehomed x) {
                // on another engine since: sent there
            } catch (MovedException m) {
                Follower fo = e.follower;
                if (fo == null) throw m;
                long p = fo.behind(e, name, m) ? ps.next() : -1;
                if (p >= 0) {
                    Router.pause(p); // a daemon behind the map: here again in a moment
                } else {
                    if (moves >= Router.MAX_REDIRECTS) throw Router.tooMany(name, m);
                    moves++;
                    fo.follow(e, this, m); // false: nowhere else to go, sent here again (counted)
                }
            } catch (UnavailableException u) {
                long p = moveUnderWay(u) ? ps.next() : -1;
                if (p < 0) throw u;
                Router.pause(p);
            }
            e = c;
            f = send.apply(e);
        }
    }

    /** Whether u is a daemon's refusal while a move of the name's slot is under way (for a moment). */
    static boolean moveUnderWay(DlockException u) {
        String s = u.serverLine();
        return s != null && s.startsWith("ERR UNAVAILABLE ")
                && (s.contains(" is moving ") || s.contains(" is arriving ") || s.contains(" importing"));
    }

    /**
     * Runs f under the lock of the engine the lease is on (with that engine), also if it moves meanwhile.
     *
     * @return false if that client is closed
     */
    boolean exec(Consumer<Engine> f) {
        while (true) {
            Engine e = c;
            boolean[] here = new boolean[1];
            if (!e.exec(() -> {
                if (c == e) {
                    here[0] = true;
                    f.accept(e);
                }
            })) {
                return false;
            }
            if (here[0]) return true;
        }
    }

    /**
     * Moves l from engine from to engine to (another partition's client): taken off from's leases (it is renewed no
     * more there), given to's -- renewed there at once -- and only then is its turn on the name given up on from (so that
     * a call of this client waiting for it there, sent on to to, finds it there). Never under an engine's lock.
     *
     * @return true if l is on another engine than from now, false if it is lost or released (it stays)
     */
    static boolean move(Lease l, Engine from, Engine to) {
        Engine.Ticket[] old = new Engine.Ticket[1];
        boolean[] moved = new boolean[1], elsewhere = new boolean[1];
        from.exec(() -> {
            if (l.c != from) {
                elsewhere[0] = true;
                return;
            }
            if (l.released || l.lostM != LostReason.NOT_LOST) return;
            from.leases.remove(l);
            old[0] = l.ticket;
            l.ticket = null;
            l.c = to;
            moved[0] = true;
        });
        if (elsewhere[0]) return true;
        if (!moved[0]) return false;
        if (!to.exec(() -> to.takeIn(l, Engine.nowMs()))) {
            // the client is being closed: the lease is lost to it, as every other
            l.lostM = LostReason.CLIENT_CLOSED;
            l.setLost(new LeaseLostException(null, null, lossText(l.name, l.token, "the client was closed", ""),
                    LostReason.CLIENT_CLOSED, null));
        }
        if (old[0] != null) from.exec(() -> from.giveTurn(old[0]));
        return true;
    }

    /**
     * Releases the lease, for try-with-resources: {@link #unlock()}, except that a lease already lost, released, or
     * of a closed client is no error (nothing is left to release).
     *
     * @throws UnconfirmedException as {@link #unlock()}
     */
    @Override
    public void close() {
        Unlock u = startClose();
        if (u != null) awaitClose(u);
    }

    /** The UNLOCK of close(), sent; null when nothing is left to release. */
    Unlock startClose() {
        mu.lock();
        try {
            if (ended) return null;
        } finally {
            mu.unlock();
        }
        return startUnlock();
    }

    /** Waits for the UNLOCK startClose sent: the outcome of {@link #close()}. */
    void awaitClose(Unlock u) {
        try {
            awaitUnlock(u);
        } catch (NotHolderException | ClientClosedException e) {
            // lost or released before: nothing to give back
        }
    }

    @Override
    public String toString() {
        return "Lease[" + name + ", token " + Wire.u64(token) + ", " + mode + (isValid() ? "" : ", not valid") + "]";
    }
}
