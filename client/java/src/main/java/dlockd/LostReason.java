package dlockd;

/** Why a lease was lost. */
public enum LostReason {
    /** Not lost (also the reason of a {@code STALE} answer to {@link Lease#check()}). */
    NOT_LOST,
    /** The server ended it: {@code * EXPIRED} (its TTL ran out), or a {@code BREAK} ({@link LeaseLostException#brokenBy()}). */
    EXPIRED,
    /** A refresh was answered {@code NO NOT_HOLDER}: the server does not know it. */
    REJECTED,
    /** It could not be confirmed before its local deadline less the guard (the server or the network is gone or slow). */
    UNCONFIRMED,
    /** The client was closed while it was held (the server keeps it until its TTL). */
    CLIENT_CLOSED
}
