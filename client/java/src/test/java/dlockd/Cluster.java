package dlockd;

import java.time.Duration;

/** Node a active, node b its standby, on one redis-server. */
final class Cluster {
    final Daemons.Proc redis, a, b;
    final String servers;

    Cluster(Daemons ds) {
        redis = ds.redis();
        a = ds.node(redis, "a");
        Daemons.eventually(Duration.ofSeconds(20), "node a active", () -> Daemons.role(a.addr).equals("active"));
        b = ds.node(redis, "b");
        Daemons.eventually(Duration.ofSeconds(20), "node b standby", () -> Daemons.role(b.addr).equals("standby"));
        servers = a.addr + "," + b.addr;
    }
}
