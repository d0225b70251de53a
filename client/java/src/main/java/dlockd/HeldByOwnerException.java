package dlockd;

/** The lease granted is held by the same owner (id and key) in another process too: the new hold was given back. */
public class HeldByOwnerException extends DlockException {
    private static final long serialVersionUID = 1L;

    HeldByOwnerException(String msg) {
        super(DlockException.Kind.HELD_BY_OWNER, null, null, msg);
    }
}
