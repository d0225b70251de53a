package dlockd;

/** Refused for want of a right or a proof: <code>NO DENIED</code> (a right, or an owner id bound to another key), <code>NO AUTH_FAILED</code>, <code>ERR NOAUTH</code>. */
public class DeniedException extends DlockException {
    private static final long serialVersionUID = 1L;

    DeniedException(String code, String line, String msg) {
        super(DlockException.Kind.DENIED, code, line, msg);
    }

    DeniedException(String msg) {
        this(null, null, msg);
    }
}
