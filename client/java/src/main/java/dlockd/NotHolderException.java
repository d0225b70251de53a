package dlockd;

/** The server does not know this lease for this owner (<code>NO NOT_HOLDER</code>): it expired, was released or broken. */
public class NotHolderException extends DlockException {
    private static final long serialVersionUID = 1L;

    NotHolderException(String code, String line, String msg) {
        super(DlockException.Kind.NOT_HOLDER, code, line, msg);
    }

    NotHolderException(String msg) {
        this(null, null, msg);
    }
}
