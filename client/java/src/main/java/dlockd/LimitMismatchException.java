package dlockd;

/** The lock lives with another limit ({@code NO LIMIT_MISMATCH}); nothing changed. {@link #limit()} is the lock's. */
public class LimitMismatchException extends DlockException {
    private static final long serialVersionUID = 1L;
    /** The lock's limit. */
    private final int limit;

    LimitMismatchException(String code, String line, String msg, int limit) {
        super(DlockException.Kind.LIMIT_MISMATCH, code, line, msg);
        this.limit = limit;
    }

    /** @return the limit the lock lives with */
    public int limit() {
        return limit;
    }
}
