package dlockd;

/** A limit of the server was reached (<code>ERR LIMIT</code>): queue length, locks per owner, a user quota, reentry count. */
public class LimitException extends DlockException {
    private static final long serialVersionUID = 1L;

    LimitException(String code, String line, String msg) {
        super(DlockException.Kind.LIMIT, code, line, msg);
    }

    LimitException(String msg) {
        this(null, null, msg);
    }
}
