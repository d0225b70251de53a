package dlockd;

/**
 * Every server of the list names another cluster id than the client's (pinned with
 * {@link DlockClient.Builder#cluster(String)} or the first a server named): they serve another lock table.
 */
public class ClusterMismatchException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    ClusterMismatchException(String msg) {
        super(DlockException.Kind.CLUSTER_MISMATCH, msg);
    }
}
