package dlockd;

/**
 * Waiting would close a cycle of owners waiting for each other ({@code NO DEADLOCK}); nothing changed at the server.
 * {@link DlockException#serverLine()} names the owners and locks of the cycle.
 */
public class DeadlockException extends DlockException {
    private static final long serialVersionUID = 1L;
    /** How many owners the cycle has. */
    private final int owners;

    DeadlockException(String code, String line, String msg, int owners) {
        super(DlockException.Kind.DEADLOCK, code, line, msg);
        this.owners = owners;
    }

    /** @return how many owners the cycle has, this client's included (0 when not said) */
    public int owners() {
        return owners;
    }
}
