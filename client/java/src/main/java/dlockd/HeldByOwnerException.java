package dlockd;

/**
 * The lease granted is held by the same owner (id and key) in another process too: the new hold was given back. Or a
 * multi-lock ({@link DlockClient#lockAll}) names a lock its owner holds already ({@code NO ALREADY_HELD <name>
 * <token>}, or a lease of this very client): a multi-lock takes new leases only, nothing was taken.
 */
public class HeldByOwnerException extends DlockException {
    private static final long serialVersionUID = 1L;

    HeldByOwnerException(String msg) {
        this(null, null, msg);
    }

    HeldByOwnerException(String code, String line, String msg) {
        super(DlockException.Kind.HELD_BY_OWNER, code, line, msg);
    }
}
