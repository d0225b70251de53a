package dlockd;

/** A wait ran out (the lock's wait in the queue, or a reply that did not come within the server timeout). */
public class LockTimeoutException extends DlockException {
    private static final long serialVersionUID = 1L;

    LockTimeoutException(String msg) {
        super(DlockException.Kind.TIMEOUT, null, null, msg);
    }
}
