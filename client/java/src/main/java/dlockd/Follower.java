package dlockd;

/**
 * Where a client's leases go when a request about one is answered {@code NO MOVED}: the router of the client the
 * engine serves (or, for an unpartitioned client, the router it becomes: {@link DlockClient#promote}).
 */
interface Follower {
    /**
     * Re-homes l, which a request to from was answered m about, onto the client of the partition m names (or the
     * map says, read again when m's epoch is newer), made if need be. Blocking; never under an engine's lock.
     *
     * @return true when l is on another engine now (or already was), false when there is nowhere else to go (m
     *     named from's partition again) or l is lost or released
     * @throws DlockException when the client cannot route (m itself), or the partition's client cannot be made
     */
    boolean follow(Engine from, Lease l, MovedException m);

    /**
     * Whether m, said by from's daemon about name, is older than the map, which sends name to from all the same: the
     * daemon is behind (the receiver of a slot that has not read the map that gives it the slot yet). The request then
     * goes to from again after a pause, not counted as a redirect. Never blocks.
     */
    boolean behind(Engine from, String name, MovedException m);

    /** The client that a request about name, answered m by from, goes to now (blocking, as follow). */
    DlockClient route(Engine from, String name, MovedException m);

    /** Runs r on a thread of the follower's (not at all once the client is closed). */
    void async(Runnable r);
}
