package dlockd;

/**
 * News of a watched lock (see {@link DlockClient#watch(String...)}): a lease of {@code name} was granted, released,
 * expired, broken or withdrawn, leaving {@code holders} holders, or its holder gave it a new value; or news of the
 * watch itself. Followers of an election ({@link LockOptions#value(String)}) see a new leader and its value in
 * {@link Kind#GRANTED}, a new value of the same leader in {@link Kind#VALUE}, and the end of its term in
 * {@link Kind#RELEASED}, {@link Kind#EXPIRED} or {@link Kind#BROKEN}.
 *
 * @param kind what happened
 * @param name the lock's name (for {@link Kind#RESUMED} and {@link Kind#REFUSED}: the pattern)
 * @param owner the lease's owner id
 * @param user the owner's user when not the default one, else ""
 * @param token the lease's fencing token (unsigned 64-bit)
 * @param holders the lock's holders once the change is made
 * @param brokenBy for {@link Kind#BROKEN}: the user of the BREAK, else ""
 * @param missed for {@link Kind#OVERFLOW}: how many events were missed
 * @param value the lease's value ({@link LockOptions#value(String)}: an elected leader's), decoded; "" when it has
 *     none; for {@link Kind#VALUE}: the new one
 */
public record WatchEvent(Kind kind, String name, String owner, String user, long token, int holders, String brokenBy,
        int missed, String value) {

    /** What an event tells. */
    public enum Kind {
        /** A new lease (a reentry is none). */
        GRANTED,
        /** Its last hold was released. */
        RELEASED,
        /** It was not refreshed in time. */
        EXPIRED,
        /** A BREAK ended it ({@code brokenBy}). */
        BROKEN,
        /** A grant Redis never recorded, taken back. */
        WITHDRAWN,
        /** The lease's holder gave it a new value ({@link Lease#proclaim}): {@code value}. */
        VALUE,
        /** {@code missed} events were lost (the server's or this client's queue was full). */
        OVERFLOW,
        /** After a reconnect or fail-over, the pattern {@code name} is watched again; what changed meanwhile was not seen. */
        RESUMED,
        /** After a reconnect, watching the pattern {@code name} was refused: it is no longer watched. */
        REFUSED,
        /** An event kind of a later server. */
        OTHER
    }

    static Kind kindOf(String w) {
        switch (w) {
            case "granted": return Kind.GRANTED;
            case "released": return Kind.RELEASED;
            case "expired": return Kind.EXPIRED;
            case "broken": return Kind.BROKEN;
            case "withdrawn": return Kind.WITHDRAWN;
            case "value": return Kind.VALUE;
            default: return Kind.OTHER;
        }
    }

    static WatchEvent of(Kind k, String name, int missed) {
        return new WatchEvent(k, name, "", "", 0, 0, "", missed, "");
    }
}
