package dlockd;

/**
 * A lease is gone: the server ended it ({@link LostReason#EXPIRED}, {@link #brokenBy()} for a {@code BREAK}), refused
 * its refresh ({@link LostReason#REJECTED}), it could not be confirmed before its local deadline less the guard
 * ({@link LostReason#UNCONFIRMED}), or the client was closed ({@link LostReason#CLIENT_CLOSED}). Also what
 * {@link Lease#check()} throws when the server says the token is {@code STALE} (reason {@link LostReason#NOT_LOST},
 * code {@code "STALE"}).
 */
public class LeaseLostException extends DlockException {
    private static final long serialVersionUID = 1L;
    /** Why. */
    private final LostReason reason;
    /** The user of a BREAK, or null. */
    private final String brokenBy;

    LeaseLostException(String code, String line, String msg, LostReason reason, String brokenBy) {
        super(DlockException.Kind.LOST, code, line, msg);
        this.reason = reason;
        this.brokenBy = brokenBy;
    }

    /** @return why the lease was lost */
    public LostReason reason() {
        return reason;
    }

    /** @return the user whose {@code BREAK} ended the lease, or null */
    public String brokenBy() {
        return brokenBy;
    }
}
