package dlockd;

import java.time.Duration;

/**
 * How to take a lock: TTL, wait, mode, renewal, news of waiters, the lease's value. Immutable; each method returns a
 * new instance.
 *
 * <pre>{@code
 * LockOptions.ttl(Duration.ofSeconds(30)).waitFor(Duration.ofMinutes(1)).shared()
 * }</pre>
 *
 * <p>Defaults: the server's TTL (30 s), wait forever (for {@code lock}), exclusive, renewed in the background, not
 * told of waiters, no value.
 */
public final class LockOptions {
    /** The defaults. */
    public static final LockOptions DEFAULT = new LockOptions(null, null, false, 0, true, false, "");

    final Duration ttl; // null: the server's default
    final Duration wait; // null: forever
    final boolean shared;
    final int limit; // 0: a plain lock
    final boolean renew;
    final boolean notifyWaiters;
    final String value; // "": none; else as given (encoded when sent)

    private LockOptions(Duration ttl, Duration wait, boolean shared, int limit, boolean renew, boolean notifyWaiters,
            String value) {
        this.ttl = ttl;
        this.wait = wait;
        this.shared = shared;
        this.limit = limit;
        this.renew = renew;
        this.notifyWaiters = notifyWaiters;
        this.value = value;
    }

    /** @return the defaults */
    public static LockOptions defaults() {
        return DEFAULT;
    }

    /**
     * @param ttl the lease's length (positive)
     * @return the defaults with this TTL
     */
    public static LockOptions ttl(Duration ttl) {
        return DEFAULT.withTtl(ttl);
    }

    /**
     * @param d the lease's length, positive; at most the server's {@code max_ttl}
     * @return these options with this TTL
     */
    public LockOptions withTtl(Duration d) {
        if (d == null || d.isNegative() || d.isZero()) throw new IllegalArgumentException("ttl " + d + ": must be positive");
        return new LockOptions(d, wait, shared, limit, renew, notifyWaiters, value);
    }

    /**
     * How long to wait in the server's queue: {@code null} (the default) waits until granted, zero tries once
     * (as {@code tryLock}); a negative duration is taken as zero.
     *
     * @param d the longest wait, or null for forever
     * @return these options with this wait
     */
    public LockOptions waitFor(Duration d) {
        if (d != null && d.isNegative()) d = Duration.ZERO;
        return new LockOptions(ttl, d, shared, limit, renew, notifyWaiters, value);
    }

    /** @return these options waiting until granted */
    public LockOptions waitForever() {
        return new LockOptions(ttl, null, shared, limit, renew, notifyWaiters, value);
    }

    /** @return these options taking the lock shared with other shared holders (a reader) */
    public LockOptions shared() {
        if (limit > 1) throw new IllegalArgumentException("shared() and limit() do not mix: a semaphore's holders are all alike");
        return new LockOptions(ttl, wait, true, limit, renew, notifyWaiters, value);
    }

    /**
     * Takes the lock as one of n permits: a semaphore. The limit belongs to the lock: while it is held or waited for
     * with another limit, the request fails with {@link LimitMismatchException}.
     *
     * @param n 2 to 1024
     * @return these options with this limit
     */
    public LockOptions limit(int n) {
        if (n < 2 || n > Wire.LIMIT_MAX) throw new IllegalArgumentException("limit(" + n + "): 2 to " + Wire.LIMIT_MAX);
        if (shared) throw new IllegalArgumentException("shared() and limit() do not mix: a semaphore's holders are all alike");
        return new LockOptions(ttl, wait, shared, n, renew, notifyWaiters, value);
    }

    /** @return these options leaving the lease to run out at its TTL unless {@link Lease#refresh} is called */
    public LockOptions noRenew() {
        return new LockOptions(ttl, wait, shared, limit, false, notifyWaiters, value);
    }

    /**
     * Asks to be told that others wait for the lease (the request carries {@code notify=waiters}; Linux DLM's blocking
     * callback): the server says how many requests wait for the lock ({@code * WAITING <name> <n> token=<token>}) when
     * the lease is granted while some wait, and when a request queues behind it -- if the lease was never told, if the
     * queue has doubled since it was last told, or if that was a second ago or more (so a queue that grows to n tells
     * it about log2(n) times, plus once a second at most). Nothing is said when the queue shrinks. Each time,
     * {@link Lease#onContended} listeners and the client's {@link DlockClient.Builder#onContended} listener are called
     * and {@link Lease#waiters()} says the count. For a holder that can let go early: a cache that can be written back,
     * a batch that can stop between items. {@code TRYLOCK}s never wait, and are never counted.
     *
     * @return these options asking for news of waiters
     */
    public LockOptions notifyWaiters() {
        return new LockOptions(ttl, wait, shared, limit, renew, true, value);
    }

    /**
     * What the lease says of itself to whoever looks at the lock (the request carries {@code value=<text>}): how an
     * <b>election</b> is held on a lock. Candidates lock the election's name with their value -- what their followers
     * should know, an address -- and wait as long as they are willing to stand; the holder is the leader, its
     * {@link Lease#token()} the term. Followers read it in {@link Status#value()} ({@link DlockClient#status}) and
     * {@link WatchEvent#value()} ({@link DlockClient#watch}); the leader says another with {@link Lease#proclaim}
     * and resigns with {@link Lease#unlock()}. A waiter's value waits with it and is the lease's once granted.
     *
     * <p>The value is sent as a text value: of its UTF-8 bytes printable ASCII is kept, a space is sent as {@code %20}
     * and '%' as {@code %25}, any other byte as '?'; it is cut at 128 bytes as sent (never inside an escape). Readers
     * get it decoded. The lease keeps it (as sent) for a {@code RECLAIM}.
     *
     * @param v the value; null or empty: none
     * @return these options with this value
     */
    public LockOptions value(String v) {
        return new LockOptions(ttl, wait, shared, limit, renew, notifyWaiters, v == null ? "" : v);
    }

    @Override
    public String toString() {
        return "LockOptions[ttl=" + ttl + ", wait=" + (wait == null ? "forever" : wait) + ", shared=" + shared
                + ", limit=" + limit + ", renew=" + renew + ", notifyWaiters=" + notifyWaiters
                + (value.isEmpty() ? "" : ", value=" + value) + "]";
    }
}
