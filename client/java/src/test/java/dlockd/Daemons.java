package dlockd;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.BooleanSupplier;

/** Runs the real dlockd (and redis-server) on free loopback ports; stops every process by PID. */
final class Daemons implements AutoCloseable {
    final List<Proc> procs = new ArrayList<>();
    final Path dir;

    Daemons() {
        try {
            dir = Files.createTempDirectory("dlockd-java-test");
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    static String bin() {
        String p = System.getenv("DLOCKD");
        if (p == null || p.isEmpty()) p = "../../build/dlockd";
        File f = new File(p);
        // never skipped: a suite that passes without a daemon proves nothing
        if (!f.canExecute()) fail("no dlockd binary at " + p + " (set DLOCKD)");
        return f.getAbsolutePath();
    }

    private static final java.util.Random RND = new java.util.Random();

    /**
     * A port free now, below the kernel's ephemeral range (32768 up): the outgoing connections and the bind(0)s of
     * parallel tests never take it meanwhile; a daemon that finds it taken all the same is started again elsewhere.
     */
    static int freePort() {
        for (int i = 0; i < 200; i++) {
            int port = 20000 + RND.nextInt(12000);
            try (ServerSocket s = new ServerSocket(port, 1, java.net.InetAddress.getLoopbackAddress())) {
                return s.getLocalPort();
            } catch (IOException e) {
                // taken: another
            }
        }
        throw new IllegalStateException("no free port");
    }

    final class Proc {
        final String name;
        Process p;
        final int port;
        final String addr;
        final Path log;

        List<String> cmd = List.of();
        String marker = "";

        Proc(String name, Process p, int port, Path log) {
            this.name = name;
            this.p = p;
            this.port = port;
            this.addr = "127.0.0.1:" + port;
            this.log = log;
        }

        void signal(String sig) {
            if (!p.isAlive()) return;
            try {
                new ProcessBuilder("kill", "-" + sig, String.valueOf(p.pid())).inheritIO().start().waitFor();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        void kill() {
            signal("CONT");
            p.destroyForcibly();
            try {
                p.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        String logTail() {
            try {
                List<String> l = Files.readAllLines(log);
                return String.join("\n", l.subList(Math.max(0, l.size() - 30), l.size()));
            } catch (IOException e) {
                return "";
            }
        }

        /** Starts it again, on the same port, after a kill. */
        void restart() {
            try {
                java.nio.file.Files.writeString(log, "");
                p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            if (!waitReady(marker)) fail(name + ": cannot listen again on " + addr);
        }

        /** Waits until the process says it is ready and the port accepts connections; false if it could not listen. */
        boolean waitReady(String marker) {
            long end = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (System.nanoTime() < end) {
                if (!p.isAlive()) {
                    String t = logTail();
                    if (t.contains("cannot listen") || t.contains("Address already in use")) return false;
                    fail(name + " exited early:\n" + t);
                }
                if (logTail().contains(marker)) {
                    try (Socket s = new Socket()) {
                        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                        return true;
                    } catch (IOException e) {
                        // not yet
                    }
                }
                sleep(20);
            }
            fail(name + " not ready on " + addr + ":\n" + logTail());
            return false;
        }
    }

    /** Starts cmd(port) on a free port until it listens there (another test may take a port first). */
    Proc startListening(String name, String marker, java.util.function.IntFunction<List<String>> cmd) {
        for (int i = 0; i < 8; i++) {
            int port = freePort();
            List<String> c = cmd.apply(port);
            Proc x = start(name, port, c.toArray(new String[0]));
            x.cmd = c;
            x.marker = marker;
            if (x.waitReady(marker)) return x;
            procs.remove(x);
        }
        fail(name + ": no port to listen on");
        return null;
    }

    Proc start(String name, int port, String... cmd) {
        Path log = dir.resolve(name + "-" + port + ".log");
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            Proc x = new Proc(name, p, port, log);
            procs.add(x);
            return x;
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A memory-only daemon, listening. */
    Proc dlockd(String... extra) {
        return startListening("dlockd", " ready (", port -> {
            List<String> a = new ArrayList<>(Arrays.asList(bin(), "--persist", "none", "--port", String.valueOf(port), "-l", "info"));
            a.addAll(Arrays.asList(extra));
            return a;
        });
    }

    Proc redis() {
        return startListening("redis", "Ready to accept connections", port -> {
            Path d = dir.resolve("redis-" + port);
            try {
                Files.createDirectories(d);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
            return List.of("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "yes", "--dir", d.toString());
        });
    }

    /** A daemon of a cluster on redis, listening. */
    Proc node(Proc redis, String node) {
        Path sd = dir.resolve("state-" + node);
        try {
            Files.createDirectories(sd);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return startListening("dlockd-" + node, " ready (", port -> List.of(bin(), "--persist", "redis", "--redis",
                "redis://127.0.0.1:" + redis.port + "/0", "--node-id", node, "--leader-lease", "1s", "--port",
                String.valueOf(port), "-l", "info", "--state-dir", sd.toString()));
    }

    /** Sends request lines on a connection of its own; returns the first reply line of each (events skipped). */
    static List<String> raw(String addr, String... lines) {
        String[] hp = addr.split(":");
        List<String> out = new ArrayList<>();
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
            s.setSoTimeout(20000);
            BufferedReader r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII));
            OutputStream o = s.getOutputStream();
            for (String l : lines) {
                o.write((l + "\r\n").getBytes(StandardCharsets.US_ASCII));
                o.flush();
                while (true) {
                    String x = r.readLine();
                    if (x == null) fail(l + ": connection closed");
                    if (x.startsWith("* ")) continue;
                    out.add(x);
                    break;
                }
            }
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out;
    }

    /** What the daemon's HELLO says of its role ("" if it does not answer). */
    static String role(String addr) {
        try {
            String hello = raw(addr, "HELLO").get(0);
            for (String w : hello.split(" ")) if (w.startsWith("role=")) return w.substring(5);
        } catch (RuntimeException | AssertionError e) {
            return "";
        }
        return "";
    }

    static void eventually(Duration timeout, String what, BooleanSupplier f) {
        long end = System.nanoTime() + timeout.toNanos();
        while (!f.getAsBoolean()) {
            if (System.nanoTime() > end) fail("not within " + timeout + ": " + what);
            sleep(20);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** A client with generous timeouts for a loaded machine. */
    static DlockClient.Builder client(String servers) {
        return new DlockClient.Builder(java.util.Map.of()).servers(servers).connectTimeout(Duration.ofSeconds(10))
                .serverTimeout(Duration.ofSeconds(10));
    }

    /** The live threads of a client. */
    static List<String> threadsOf(DlockClient c) {
        java.util.regex.Pattern p = java.util.regex.Pattern.compile("dlockd-[a-z]+-" + c.engine().id + "(-[0-9]+)?");
        List<String> out = new ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && p.matcher(t.getName()).matches()) out.add(t.getName());
        }
        return out;
    }

    @Override
    public void close() {
        boolean print = System.getenv("DLOCKD_TEST_LOGS") != null;
        for (Proc x : procs) {
            x.kill();
            if (print) System.err.println("---- " + x.name + " log (tail) ----\n" + x.logTail());
        }
        try (var w = Files.walk(dir)) {
            w.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException ignored) {
            // a temp dir left
        }
    }
}
