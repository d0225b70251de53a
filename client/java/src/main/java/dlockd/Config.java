package dlockd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.ObjIntConsumer;
import javax.net.ssl.SSLSocketFactory;

/** The client's configuration: the DLOCK_* environment first, then the builder's settings. */
final class Config {
    /** One daemon: "host:port" as written (a standby's active= is matched against it), or a unix socket path. */
    static final class Address {
        final String name;
        final String host;
        final int port;
        final String path;

        Address(String name, String host, int port, String path) {
            this.name = name;
            this.host = host;
            this.port = port;
            this.path = path;
        }
    }

    List<Address> addrs;
    String password = "";
    String user = "";
    String owner = "";
    String key = "";
    String cluster = "";
    SSLSocketFactory tls;
    String tlsServerName = "";
    Duration connectTimeout = Duration.ofSeconds(2);
    Duration serverTimeout = Duration.ofSeconds(5);
    boolean describe = true;
    Duration lostGuard;
    BiConsumer<Lease, LeaseLostException> onLost;
    Consumer<Lease> onAtRisk;
    ObjIntConsumer<Lease> onContended;

    /** A copy (the settings are shared: listeners, the socket factory). */
    Config copy() {
        Config c = new Config();
        c.addrs = addrs;
        c.password = password;
        c.user = user;
        c.owner = owner;
        c.key = key;
        c.cluster = cluster;
        c.tls = tls;
        c.tlsServerName = tlsServerName;
        c.connectTimeout = connectTimeout;
        c.serverTimeout = serverTimeout;
        c.describe = describe;
        c.lostGuard = lostGuard;
        c.onLost = onLost;
        c.onAtRisk = onAtRisk;
        c.onContended = onContended;
        return c;
    }

    static String env(Map<String, String> env, String k) {
        String v = env.get(k);
        return v == null ? "" : v;
    }

    /** Parses "host:port,host:port" (IPv6 hosts in brackets; port default 7420; '/...' or 'unix:...' a socket). */
    static List<Address> parseServers(String s) {
        String[] entries = s.split(",", -1);
        String bad = "bad servers list '" + s + "': 1 to " + Wire.SERVERS_MAX + " host:port, comma-separated";
        if (entries.length > Wire.SERVERS_MAX) throw new IllegalArgumentException(bad);
        List<Address> out = new ArrayList<>();
        for (String e : entries) {
            e = e.trim();
            if (e.isEmpty()) throw new IllegalArgumentException(bad);
            if (e.startsWith("/") || e.startsWith("unix:")) {
                String p = e.startsWith("unix:") ? e.substring(5) : e;
                out.add(new Address(p, null, 0, p));
                continue;
            }
            String host = e;
            int port = Wire.DEFAULT_PORT;
            int i = e.lastIndexOf(':');
            if (i >= 0 && e.indexOf(']', i) < 0) {
                try {
                    port = Integer.parseInt(e.substring(i + 1));
                } catch (NumberFormatException x) {
                    port = -1;
                }
                if (port < 1 || port > 65535) throw new IllegalArgumentException("server '" + e + "': bad port (1-65535)");
                host = e.substring(0, i);
            }
            if (host.startsWith("[")) host = host.substring(1);
            if (host.endsWith("]")) host = host.substring(0, host.length() - 1);
            if (host.isEmpty()) throw new IllegalArgumentException("bad server '" + e + "': host:port");
            out.add(new Address(e, host, port, null));
        }
        return out;
    }

    /** The defaults the environment gives (DLOCK_SERVERS, DLOCK_SOCKET, DLOCK_HOST/PORT, ...). */
    static Config fromEnv(Map<String, String> env) {
        Config c = new Config();
        if (!env(env, "DLOCK_SERVERS").isEmpty()) {
            c.addrs = parseServers(env(env, "DLOCK_SERVERS"));
        } else if (!env(env, "DLOCK_SOCKET").isEmpty()) {
            String p = env(env, "DLOCK_SOCKET");
            c.addrs = List.of(new Address(p, null, 0, p));
        } else {
            String h = env(env, "DLOCK_HOST"), p = env(env, "DLOCK_PORT");
            if (h.isEmpty()) h = "127.0.0.1";
            if (p.isEmpty()) p = String.valueOf(Wire.DEFAULT_PORT);
            c.addrs = parseServers((h.indexOf(':') >= 0 ? "[" + h + "]" : h) + ":" + p);
        }
        c.password = env(env, "DLOCK_SECRET");
        if (c.password.isEmpty()) c.password = env(env, "DLOCK_PASSWORD");
        c.user = env(env, "DLOCK_USER");
        String o = env(env, "DLOCK_OWNER");
        if (!o.isEmpty()) c.setOwner(o);
        c.cluster = env(env, "DLOCK_CLUSTER");
        String on = env(env, "DLOCK_TLS");
        String ca = env(env, "DLOCK_TLS_CA"), cert = env(env, "DLOCK_TLS_CERT"), key = env(env, "DLOCK_TLS_KEY");
        c.tlsServerName = env(env, "DLOCK_TLS_SERVER_NAME");
        if ((!on.isEmpty() && !on.equals("0")) || !ca.isEmpty() || !cert.isEmpty() || !key.isEmpty()) {
            c.tls = Pem.socketFactory(ca.isEmpty() ? null : ca, cert.isEmpty() ? null : cert, key.isEmpty() ? null : key);
        }
        return c;
    }

    void setOwner(String id) {
        int i = id.indexOf('=');
        if (i >= 0) {
            owner = id.substring(0, i);
            key = id.substring(i + 1);
        } else {
            owner = id;
        }
    }

    void validate() {
        if (!user.isEmpty()) Wire.checkUser(user);
        if (!password.isEmpty() && (!Wire.printableWord(password) || password.length() > 512)) {
            throw new IllegalArgumentException("bad password: 1-512 printable ASCII characters, no space");
        }
        if (!owner.isEmpty()) Wire.checkOwner(owner);
        if (!key.isEmpty()) Wire.checkKey(key);
        if (!cluster.isEmpty()) Wire.checkCluster(cluster);
        if (connectTimeout == null || connectTimeout.isNegative() || connectTimeout.isZero()) connectTimeout = Duration.ofSeconds(2);
        if (serverTimeout == null || serverTimeout.isNegative() || serverTimeout.isZero()) serverTimeout = Duration.ofSeconds(5);
        if (lostGuard != null && (lostGuard.isNegative() || lostGuard.isZero())) lostGuard = null;
    }
}
