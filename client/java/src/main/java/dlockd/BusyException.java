package dlockd;

/**
 * The lock cannot be had now ({@code NO BUSY}, from {@code tryLock} or a zero wait), or is held by this very client
 * (whose holds of one name are taken one at a time). {@link #holder()} names who holds it when the server said.
 */
public class BusyException extends DlockException {
    private static final long serialVersionUID = 1L;
    private final transient Holder holder;

    BusyException(String code, String line, String msg, Holder holder) {
        super(DlockException.Kind.BUSY, code, line, msg);
        this.holder = holder;
    }

    /** @return the lock's first holder as the server named it (its {@code ttl()} is the lower bound of the wait), or null */
    public Holder holder() {
        return holder;
    }
}
