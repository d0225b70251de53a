package dlockd;

/** The calling thread was interrupted while it waited; the request was given up (a wait is cancelled at the server, a grant given back) and the thread's interrupt flag is set again. */
public class DlockInterruptedException extends DlockException {
    private static final long serialVersionUID = 1L;

    DlockInterruptedException(String msg) {
        super(DlockException.Kind.INTERRUPTED, null, null, msg);
    }
}
