package dlockd;

/** The client was closed (or closes) while the call was pending. */
public class ClientClosedException extends DlockException {
    private static final long serialVersionUID = 1L;

    ClientClosedException(String msg) {
        super(DlockException.Kind.CLOSED, null, null, msg);
    }
}
