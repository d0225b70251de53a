package dlockd;

/** An unlock was sent (or will be once connected) but not confirmed within the server timeout: it is sent again after reconnects, and the lock ends by its TTL at the latest. */
public class UnconfirmedException extends DlockException {
    private static final long serialVersionUID = 1L;

    UnconfirmedException(String msg) {
        super(DlockException.Kind.UNCONFIRMED, null, null, msg);
    }
}
