package dlockd;

/**
 * No server could be used: none answers within the connect timeout, or the server said {@code ERR UNAVAILABLE}
 * (its persistence is down) or {@code ERR NOT_ACTIVE} (a standby).
 */
public class UnavailableException extends DlockException {
    private static final long serialVersionUID = 1L;

    UnavailableException(String code, String line, String msg) {
        super(DlockException.Kind.UNAVAILABLE, code, line, msg);
    }

    UnavailableException(DlockException.Kind kind, String msg) {
        super(kind, null, null, msg);
    }
}
