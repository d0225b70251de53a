package dlockd;

/** The server said what no server of this protocol may; the connection was dropped. */
public class DlockProtocolException extends DlockException {
    private static final long serialVersionUID = 1L;

    DlockProtocolException(String msg) {
        super(DlockException.Kind.PROTOCOL, null, null, msg);
    }
}
