package dlockd;

import java.util.List;

/**
 * Another partition serves the name ({@code NO MOVED <partition> <host:port,...>|- <map-epoch>}): the request was not
 * executed. A client that found the service partitioned when it connected follows a {@code MOVED} itself (it reads
 * the partition map again, or goes where the server says) and throws this only when a call was sent on more than 3
 * times in a row. A client whose first {@code MAP} said no map (a partitioned daemon that had not read its map yet says
 * so too) asks {@code MAP} again on a {@code NO MOVED}, and routes from then on if there is a map now; while there is
 * none, it throws this as the server said it.
 */
public class MovedException extends DlockException {
    private static final long serialVersionUID = 1L;
    private final String partition;
    private final String addresses;
    private final long mapEpoch;

    MovedException(String code, String line, String msg, String partition, String addresses, long mapEpoch) {
        super(DlockException.Kind.MOVED, code, line, msg);
        this.partition = partition == null || partition.equals("-") ? "" : partition;
        this.addresses = addresses == null || addresses.equals("-") ? "" : addresses;
        this.mapEpoch = mapEpoch;
    }

    /** The exception of {@code NO MOVED <partition> <addrs> <epoch>}'s values. */
    static MovedException of(String code, String line, List<String> args) {
        String p = args.size() > 0 ? args.get(0) : "";
        String a = args.size() > 1 ? args.get(1) : "";
        Long ep = args.size() > 2 ? Wire.parseU64(args.get(2)) : null;
        return new MovedException(code, line, null, p, a, ep == null ? 0 : ep);
    }

    /** @return the partition that serves the name, as the server said ("" if it did not, or said "-") */
    public String partition() {
        return partition;
    }

    /** @return its daemons' addresses ("host:port,host:port"), "" when the server knows none */
    public String addresses() {
        return addresses;
    }

    /** @return the epoch of the partition map the server answered from (0 if it did not say) */
    public long mapEpoch() {
        return mapEpoch;
    }
}
