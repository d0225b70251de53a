package dlockd;

/** The connection closed under a request that may not be sent twice: its outcome is unknown. */
public class ConnectionLostException extends DlockException {
    private static final long serialVersionUID = 1L;

    ConnectionLostException(String msg) {
        super(DlockException.Kind.CONNECTION_LOST, null, null, msg);
    }
}
