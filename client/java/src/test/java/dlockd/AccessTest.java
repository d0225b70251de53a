package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Users and AUTH, TLS (server and client certificates from PEM files), the unix socket, the environment. */
@Timeout(30)
class AccessTest {
    static void run(Path dir, String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (p.waitFor() != 0) fail(String.join(" ", cmd) + ":\n" + out);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    static String capture(String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(false).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            p.waitFor();
            return out;
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Test
    void userAuth() throws Exception {
        try (Daemons ds = new Daemons()) {
            String[] sec = capture(Daemons.bin(), "--new-secret").trim().split("\\s+");
            Path users = ds.dir.resolve("users");
            Files.writeString(users, "alice " + sec[1] + " lock=app/ read=app/\n");
            Path conf = ds.dir.resolve("dlockd.conf");
            Files.writeString(conf, "[server]\nusers_file = " + users + "\n");
            Daemons.Proc d = ds.dlockd("-c", conf.toString());
            try (DlockClient c = Daemons.client(d.addr).user("alice", sec[0]).build()) {
                try (Lease l = c.lock("app/x", Duration.ofSeconds(5), null)) {
                    assertTrue(l.isValid());
                }
                DeniedException e = assertThrows(DeniedException.class, () -> c.tryLock("other/x", Duration.ofSeconds(5)));
                assertEquals("DENIED", e.code());
            }
            long t0 = System.nanoTime();
            DeniedException e = assertThrows(DeniedException.class,
                    () -> Daemons.client(d.addr).user("alice", "wrong-secret").connectTimeout(Duration.ofSeconds(20)).build());
            assertEquals("AUTH_FAILED", e.code());
            assertTrue(System.nanoTime() - t0 < 10_000_000_000L, "refused at once");
            assertThrows(DeniedException.class, () -> Daemons.client(d.addr).build()); // no AUTH at all
        }
    }

    @Test
    void tls() throws Exception {
        try (Daemons ds = new Daemons()) {
            Path dir = ds.dir;
            String ec = "ec_paramgen_curve:prime256v1";
            run(dir, "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", ec, "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                    "-days", "1", "-subj", "/CN=dlockd test CA");
            Files.writeString(dir.resolve("srv.ext"), "subjectAltName=IP:127.0.0.1\n");
            run(dir, "openssl", "req", "-newkey", "ec", "-pkeyopt", ec, "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost");
            run(dir, "openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", "srv.pem", "-days", "1", "-extfile", "srv.ext");
            run(dir, "openssl", "req", "-newkey", "ec", "-pkeyopt", ec, "-nodes", "-keyout", "cli.key", "-out", "cli.csr", "-subj", "/CN=client");
            run(dir, "openssl", "x509", "-req", "-in", "cli.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", "cli.pem", "-days", "1");
            run(dir, "openssl", "pkey", "-in", "cli.key", "-traditional", "-out", "cli-sec1.key");
            run(dir, "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "rsa.key", "-out", "rsa.csr", "-subj", "/CN=rsa");
            run(dir, "openssl", "x509", "-req", "-in", "rsa.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", "rsa.pem", "-days", "1");
            run(dir, "openssl", "pkey", "-in", "rsa.key", "-traditional", "-out", "rsa-pkcs1.key");
            assertTrue(Files.readString(dir.resolve("cli-sec1.key")).contains("EC PRIVATE KEY"));
            assertTrue(Files.readString(dir.resolve("rsa-pkcs1.key")).contains("RSA PRIVATE KEY"));
            String ca = dir.resolve("ca.pem").toString();
            Daemons.Proc d = ds.dlockd("--tls-cert", dir.resolve("srv.pem").toString(), "--tls-key", dir.resolve("srv.key").toString(),
                    "--tls-ca", ca);
            // the server's certificate, from the CA file
            try (DlockClient c = Daemons.client(d.addr).tls(Pem.context(ca, null, null)).build()) {
                c.lock("tls/a", Duration.ofSeconds(5), null).close();
            }
            // with a client certificate: PKCS#8, SEC1 and PKCS#1 keys
            for (String[] kp : new String[][] {{"cli.pem", "cli.key"}, {"cli.pem", "cli-sec1.key"}, {"rsa.pem", "rsa-pkcs1.key"}}) {
                try (DlockClient c = Daemons.client(d.addr)
                        .tls(Pem.socketFactory(ca, dir.resolve(kp[0]).toString(), dir.resolve(kp[1]).toString())).build()) {
                    c.ping();
                }
            }
            // from the environment
            Map<String, String> env = new HashMap<>();
            env.put("DLOCK_SERVERS", d.addr);
            env.put("DLOCK_TLS_CA", ca);
            env.put("DLOCK_TLS_CERT", dir.resolve("cli.pem").toString());
            env.put("DLOCK_TLS_KEY", dir.resolve("cli.key").toString());
            env.put("DLOCK_OWNER", "tls-env");
            try (DlockClient c = new DlockClient.Builder(env).build()) {
                assertEquals("tls-env", c.owner());
                c.ping();
            }
            // a name the certificate does not carry is refused
            assertThrows(UnavailableException.class, () -> Daemons.client(d.addr).tls(Pem.context(ca, null, null), "elsewhere.example")
                    .connectTimeout(Duration.ofSeconds(20)).build());
            // an untrusted server is refused at once
            long t0 = System.nanoTime();
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> Daemons.client(d.addr).tls(javax.net.ssl.SSLContext.getDefault()).connectTimeout(Duration.ofSeconds(20)).build());
            assertTrue(System.nanoTime() - t0 < 10_000_000_000L, "refused at once: " + e);
            assertTrue(e.getMessage().contains("TLS"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> Pem.context(ca, dir.resolve("cli.pem").toString(), null));
        }
    }

    @Test
    void unixSocketAndEnvironment() throws Exception {
        try (Daemons ds = new Daemons()) {
            Path sock = ds.dir.resolve("d.sock");
            Daemons.Proc d = ds.dlockd("-s", sock.toString());
            Daemons.eventually(Duration.ofSeconds(5), "the socket", () -> Files.exists(sock));
            Map<String, String> env = new HashMap<>();
            env.put("DLOCK_SOCKET", sock.toString());
            env.put("DLOCK_OWNER", "unix-owner=abcdefghijklmnop1234");
            try (DlockClient c = new DlockClient.Builder(env).build()) {
                assertEquals("unix-owner", c.owner());
                assertEquals("abcdefghijklmnop1234", c.ownerKey());
                try (Lease l = c.lock("unix/a", Duration.ofSeconds(5), null)) {
                    assertEquals("unix-owner", c.status("unix/a").owner());
                    assertTrue(l.isValid());
                }
            }
            try (DlockClient c = Daemons.client("unix:" + sock).build()) {
                c.ping();
            }
            env.clear();
            env.put("DLOCK_HOST", "127.0.0.1");
            env.put("DLOCK_PORT", String.valueOf(d.port));
            try (DlockClient c = new DlockClient.Builder(env).build()) {
                c.ping();
            }
        }
    }
}
