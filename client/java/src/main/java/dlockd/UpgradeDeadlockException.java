package dlockd;

/** This owner holds the lock shared and asked for it exclusive (<code>NO UPGRADE_DEADLOCK</code>): release, then queue for exclusive. */
public class UpgradeDeadlockException extends DlockException {
    private static final long serialVersionUID = 1L;

    UpgradeDeadlockException(String code, String line, String msg) {
        super(DlockException.Kind.UPGRADE_DEADLOCK, code, line, msg);
    }

    UpgradeDeadlockException(String msg) {
        this(null, null, msg);
    }
}
