// SPDX-License-Identifier: MIT
//
// JavaWorker: a lock worker of the fault campaign, on the Java client.
//
//     java -cp dlockd.jar:<classes> JavaWorker lock <hist> <host> <port> <owner> <locks> <seed> <ms>
//     java -cp dlockd.jar:<classes> JavaWorker clock     (prints the clock calibration, checks it)
//
// The twin of worker.c's "worker lock", pyworker.py and goworker (same arguments, same history records, judged by
// the same checker, check.c): for <ms> or until SIGTERM it takes random locks through dlockd.DlockClient, with
// random TTLs, waits and hold times (some longer than the TTL, so the client renews), refreshes some with another
// TTL (shorter or longer: the client then counts on the shorter deadline from the send), and leaves some held as
// "dlock lock" does (the client is closed without releasing; the worker goes on as a new owner with a history file
// of its own, <hist>~N.hist). <locks> is "<l>[:<s>:<p>]": exclusive locks L0.., read/write locks S0.. (shared two
// times in three), semaphores P0.. of PERMITS permits.
//
// Records, one write(2) each on an O_APPEND descriptor, before the worker acts on what they say, times in ms on
// CLOCK_BOOTTIME (the clock of the other workers' records):
//
//     G lock token deadline mode   a grant received (x, s or p<n>)
//     R lock token deadline        the client's deadline moved (a renewal or a refresh)
//     U lock token                 about to release: no longer holding
//     L lock token reason deadline the client says the lease is lost (1 expired, 2 rejected, 3 unconfirmed)
//     E lock rc                    a lock that did not grant (rc: as libdlock's DLOCK_E* codes)
//
// The clock. Java reads CLOCK_MONOTONIC (System.nanoTime) but not CLOCK_BOOTTIME; the two differ by a constant
// while the machine is not suspended (the campaign does not suspend it). /proc/uptime is CLOCK_BOOTTIME, truncated
// to 10 ms. At start the worker reads it in a tight loop between two nanoTime readings and catches the moments its
// value steps: the step to v happened between the reading before the last read that still showed the old value and
// the reading after the first read that shows v, so boottime - nanoTime lies in a bracket [offLow, offHigh] as wide
// as about two reads of the file (microseconds; the narrowest of several steps is kept). The worker then
// stretches each hold over the whole bracket: the moment a hold begins (G) is reckoned with offLow (never later than
// the truth), the moments that end one (U, L, every deadline) with offHigh (never earlier). So the intervals the
// checker builds from this worker contain the true ones, compared with the other workers' on one clock.
//
// A deadline is read as the client tells it: remaining(), then the clock, so it is never earlier than the client's.

import dlockd.BusyException;
import dlockd.ConnectionLostException;
import dlockd.DeniedException;
import dlockd.DlockClient;
import dlockd.DlockException;
import dlockd.Lease;
import dlockd.LeaseLostException;
import dlockd.LimitException;
import dlockd.LimitMismatchException;
import dlockd.LockOptions;
import dlockd.LockTimeoutException;
import dlockd.LostReason;
import dlockd.UnavailableException;
import dlockd.UpgradeDeadlockException;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class JavaWorker {
    static final int PERMITS = 2; // the limit of the semaphores P0..: every worker asks the same
    /** A deadline read again that differs by more than this moved (a renewal moves it by a third of the TTL). */
    static final long MOVED = 3;

    static volatile boolean stopped;
    static FileOutputStream hist; // under JavaWorker.class: a loss is recorded from a client thread

    // ---- the clock ----------------------------------------------------------------

    /** CLOCK_BOOTTIME - System.nanoTime(), ns: the bracket calibrated at start. */
    static long offLow, offHigh;

    /** /proc/uptime's first field, in ns (a multiple of 10 ms). */
    static long uptimeNs(FileChannel ch, ByteBuffer buf) throws IOException {
        buf.clear();
        ch.read(buf, 0);
        long sec = 0, frac = 0;
        int fd = -1;
        for (int i = 0; i < buf.position(); i++) {
            byte b = buf.get(i);
            if (b == '.') {
                fd = 0;
            } else if (b >= '0' && b <= '9') {
                if (fd < 0) {
                    sec = sec * 10 + (b - '0');
                } else {
                    frac = frac * 10 + (b - '0');
                    fd++;
                }
            } else {
                break;
            }
        }
        while (fd < 9) {
            frac *= 10;
            fd++;
        }
        return sec * 1_000_000_000L + frac;
    }

    /** Finds boottime - nanoTime within [offLow, offHigh] from the steps of /proc/uptime; returns the width. */
    static long calibrate() {
        long best = Long.MAX_VALUE;
        try (FileChannel ch = FileChannel.open(Path.of("/proc/uptime"), StandardOpenOption.READ)) {
            ByteBuffer buf = ByteBuffer.allocate(128);
            for (int i = 0; i < 200; i++) uptimeNs(ch, buf); // warm up
            long prevV = -1, prevBefore = 0;
            int steps = 0;
            long end = System.nanoTime() + 2_000_000_000L;
            while ((steps < 8 || best > 200_000) && steps < 100 && System.nanoTime() < end) {
                long before = System.nanoTime();
                long v = uptimeNs(ch, buf);
                long after = System.nanoTime();
                if (prevV >= 0 && v > prevV) {
                    // boottime reached v after the previous read began and before this one ended
                    steps++;
                    long w = after - prevBefore;
                    if (w < best) {
                        best = w;
                        offLow = v - after;
                        offHigh = v - prevBefore;
                    }
                }
                prevV = v;
                prevBefore = before;
            }
        } catch (IOException e) {
            System.err.println("javaworker: /proc/uptime: " + e);
            System.exit(2);
        }
        if (best == Long.MAX_VALUE) {
            System.err.println("javaworker: /proc/uptime does not move");
            System.exit(2);
        }
        return best;
    }

    /** Now, ms on CLOCK_BOOTTIME, never later than the truth: the moment a hold begins. */
    static long nowEarlyMs() {
        return Math.floorDiv(System.nanoTime() + offLow, 1_000_000L);
    }

    /** Now, ms on CLOCK_BOOTTIME, never earlier than the truth (to the ms): a moment a hold may end. */
    static long nowLateMs() {
        return Math.floorDiv(System.nanoTime() + offHigh, 1_000_000L);
    }

    /** The lease's local deadline, ms on CLOCK_BOOTTIME, never before the client's; 0 once it counts no time left. */
    static long deadline(Lease l) {
        long rem = l.remaining().toNanos(); // the client reads its clock in there ...
        if (rem <= 0) return 0;
        long t = System.nanoTime(); // ... and this is after
        return Math.floorDiv(t + rem + offHigh + 999_999L, 1_000_000L);
    }

    // ---- the history ----------------------------------------------------------------

    /** One record, one write(2), at the time given. */
    static synchronized void recordAt(long ms, String text) {
        byte[] line = (ms + " " + text + "\n").getBytes(StandardCharsets.US_ASCII);
        try {
            hist.write(line);
        } catch (IOException e) {
            System.err.println("javaworker: history: " + e);
            Runtime.getRuntime().halt(2);
        }
    }

    /** A record whose time may end a hold (U, L, R, E). */
    static void record(String text) {
        recordAt(nowLateMs(), text);
    }

    static synchronized void openHist(String path) {
        try {
            FileOutputStream f = new FileOutputStream(path, true); // O_APPEND
            if (hist != null) hist.close();
            hist = f;
        } catch (IOException e) {
            System.err.println("javaworker: " + path + ": " + e);
            Runtime.getRuntime().halt(2);
        }
    }

    static int rcOf(Throwable e) {
        if (e instanceof BusyException) return -1;
        if (e instanceof LockTimeoutException) return -2;
        if (e instanceof ConnectionLostException) return -7;
        if (e instanceof UnavailableException) return -9;
        if (e instanceof LimitException) return -10;
        if (e instanceof LimitMismatchException) return -16;
        if (e instanceof UpgradeDeadlockException) return -17;
        if (e instanceof DeniedException) return -19;
        return -14;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            // stopping: the loops look at the flag
        }
    }

    // ---- the worker -------------------------------------------------------------------

    final String histBase, ownerBase, servers;
    String owner;
    int n;
    final int nl, ns, np;
    final long end;
    final Random rnd;
    DlockClient c;

    JavaWorker(String[] a) {
        histBase = a[0].endsWith(".hist") ? a[0].substring(0, a[0].length() - 5) : a[0];
        ownerBase = a[3];
        owner = a[3];
        servers = a[1].contains(":") ? a[1] : a[1] + ":" + a[2];
        int[] locks = new int[3];
        String[] p = a[4].split(":", 3);
        for (int i = 0; i < p.length; i++) locks[i] = Integer.parseInt(p[i]);
        nl = locks[0];
        ns = locks[1];
        np = locks[2];
        rnd = new Random(Long.parseLong(a[5]));
        end = nowLateMs() + Long.parseLong(a[6]);
    }

    void connect() {
        while (!stopped) {
            try {
                c = DlockClient.builder().servers(servers).owner(owner).serverTimeout(Duration.ofSeconds(3)).build();
                return;
            } catch (DlockException e) {
                record("E - " + rcOf(e));
                sleep(200);
            }
        }
    }

    /** A lease left held: go on as another owner, in another file. */
    void nextOwner() {
        n++;
        owner = ownerBase + "~" + n;
        openHist(histBase + "~" + n + ".hist");
    }

    /** A lease the worker holds, with the deadline it last recorded. */
    static final class Held {
        final Lease l;
        final AtomicLong seen = new AtomicLong();
        boolean ended; // under JavaWorker.class: released, or its client closed: no L any more
        final CompletableFuture<Void> told = new CompletableFuture<>();

        Held(Lease l) {
            this.l = l;
        }

        /** Records a move of the deadline (R). */
        void note() {
            long d = deadline(l), s = seen.get();
            if (d != 0 && (d > s + MOVED || d < s - MOVED)) {
                record("R " + l.name() + " " + Long.toUnsignedString(l.token()) + " " + d);
                seen.set(d);
            }
        }

        /** The listener: records the loss (L) the moment the client reports it, as pyworker's on_lost does. */
        void lost(LeaseLostException e) {
            try {
                int reason;
                if (e.reason() == LostReason.CLIENT_CLOSED || e.reason() == LostReason.NOT_LOST) return; // left held
                else if (e.reason() == LostReason.EXPIRED) reason = 1;
                else if (e.reason() == LostReason.REJECTED) reason = 2;
                else reason = 3;
                synchronized (JavaWorker.class) {
                    if (ended) return;
                    record("L " + l.name() + " " + Long.toUnsignedString(l.token()) + " " + reason + " " + seen.get());
                }
            } finally {
                told.complete(null);
            }
        }

        /** No L after this; a loss the client reported already is recorded first (goworker waits for its watch). */
        void end() {
            if (l.lostReason() != LostReason.NOT_LOST) {
                try {
                    told.get(2, TimeUnit.SECONDS);
                } catch (Exception e) {
                    // recorded or not, go on
                }
            }
            synchronized (JavaWorker.class) {
                ended = true;
            }
        }
    }

    /** Holds about ms, noting each move of the deadline; true if still valid at the end. */
    static boolean hold(Held h, long ms) {
        long until = nowLateMs() + ms;
        while (!stopped && nowLateMs() < until) {
            h.note(); // the deadline first, also of a lease that just ended (worker.c)
            if (!h.l.isValid()) return false;
            sleep(10);
        }
        return h.l.isValid();
    }

    void oneLock() {
        long[] ttls = {300, 800, 2000};
        long ttl = ttls[rnd.nextInt(ttls.length)];
        LockOptions o = LockOptions.ttl(Duration.ofMillis(ttl));
        switch (rnd.nextInt(4)) {
            case 0: o = o.waitFor(Duration.ZERO); break;
            case 1: o = o.waitFor(Duration.ofMillis(500)); break;
            case 2: o = o.waitFor(Duration.ofSeconds(3)); break;
            default: o = o.waitForever(); // until granted or stopped
        }
        int k = rnd.nextInt(nl + ns + np);
        String name, mode;
        if (k < nl) {
            name = "L" + k;
            mode = "x";
        } else if (k < nl + ns) {
            name = "S" + (k - nl);
            mode = "x";
            if (rnd.nextInt(3) != 0) {
                o = o.shared();
                mode = "s";
            }
        } else {
            name = "P" + (k - nl - ns);
            mode = "p" + PERMITS;
            o = o.limit(PERMITS);
        }
        Lease l;
        try {
            l = c.lock(name, o);
        } catch (DlockException e) {
            Thread.interrupted(); // a SIGTERM's interrupt ended the wait: stopped says so
            record("E " + name + " " + rcOf(e));
            if (!(e instanceof LockTimeoutException) && !(e instanceof BusyException)) sleep(50); // do not spin
            return;
        }
        // a G begins a hold: the time is the earliest it can be, the deadline the latest
        long at = nowEarlyMs();
        Held h = new Held(l);
        h.seen.set(deadline(l));
        recordAt(at, "G " + name + " " + Long.toUnsignedString(l.token()) + " " + h.seen.get() + " " + mode);
        l.onLost(h::lost);
        try {
            boolean changed = false;
            if (rnd.nextInt(4) == 0) {
                long[] newTtls = {20, 150, 300, 800, 2000, 3000};
                long nt = newTtls[rnd.nextInt(newTtls.length)];
                // recorded before it is sent: a refresh that shortens the lease ends it from the server's receipt
                long shortD = nowLateMs() + nt;
                if (shortD < h.seen.get()) {
                    record("R " + name + " " + Long.toUnsignedString(l.token()) + " " + shortD);
                    h.seen.set(shortD);
                }
                try {
                    l.refresh(Duration.ofMillis(nt));
                } catch (DlockException e) {
                    Thread.interrupted();
                }
                changed = true;
                // also when no longer valid: a refresh to 20 ms may have ended it already (worker.c, change_ttl)
                h.note();
            }
            if (k < nl && changed && rnd.nextInt(3) == 0) {
                // leave it held, as "dlock lock" does: nobody renews it, and its interval lasts until the deadline
                // it was told
                h.end();
                c.close();
                c = null;
                nextOwner();
                connect();
                return;
            }
            long holdMs = ttl * new int[] {0, 1, 2, 6}[rnd.nextInt(4)] / 4;
            // U before the release, held to the end or not: a lease no longer valid is given back too, and its L
            // record, written by the listener, may come after the release let the next holder in (a violation of
            // the records, not of the lock: seen here, seed 20261405)
            hold(h, holdMs);
            record("U " + name + " " + Long.toUnsignedString(l.token()));
            Thread.interrupted(); // unlock even when stopping
            try {
                l.unlock();
            } catch (DlockException e) {
                // lost, or not confirmed in time
            }
        } finally {
            h.end();
        }
    }

    void run() {
        connect();
        while (!stopped && c != null && nowLateMs() < end) oneLock();
        if (c != null) c.close();
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("clock")) {
            clockCheck();
            return;
        }
        if (args.length != 8 || !args[0].equals("lock")) {
            System.err.println("usage: JavaWorker lock <hist> <host> <port> <owner> <locks> <seed> <ms>");
            System.exit(64);
        }
        calibrate();
        openHist(args[1]);
        String[] a = java.util.Arrays.copyOfRange(args, 1, 8);
        long ms = Long.parseLong(a[6]);
        Thread main = Thread.currentThread();
        // SIGTERM/SIGINT: stop, end the wait under way (an interrupt cancels it at the server), release what is
        // held (U first), close; the JVM exits once main is done.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopped = true;
            main.interrupt();
            try {
                main.join(10_000);
            } catch (InterruptedException e) {
                // exit
            }
        }, "javaworker-stop"));
        // past the run and a grace, a worker still blocked (a wait forever on a lock closed for max_ttl) ends,
        // leaving its history true (worker.c)
        Thread guard = new Thread(() -> {
            sleep(ms + 30_000);
            Runtime.getRuntime().halt(0);
        }, "javaworker-guard");
        guard.setDaemon(true);
        guard.start();
        new JavaWorker(a).run();
        // everything is written (no buffer); halt, not exit: exit would wait for the SIGTERM hook, which waits for
        // this thread
        Runtime.getRuntime().halt(0);
    }

    /** Calibrates several times and checks each bracket against /proc/uptime read later. */
    static void clockCheck() throws IOException {
        for (int i = 0; i < 5; i++) {
            long w = calibrate();
            long lo = offLow, hi = offHigh;
            long bad = 0, reads = 0;
            try (FileChannel ch = FileChannel.open(Path.of("/proc/uptime"), StandardOpenOption.READ)) {
                ByteBuffer buf = ByteBuffer.allocate(128);
                long end = System.nanoTime() + 200_000_000L;
                while (System.nanoTime() < end) {
                    long before = System.nanoTime();
                    long v = uptimeNs(ch, buf);
                    long after = System.nanoTime();
                    reads++;
                    // boottime at the read lies in [before + lo, after + hi]; /proc/uptime is it truncated to 10 ms
                    if (after + hi < v || before + lo >= v + 10_000_000L) bad++;
                }
            }
            System.out.printf("bracket %.1f us (offset %d..%d ns); %d reads of /proc/uptime after, %d outside%n",
                    w / 1e3, lo, hi, reads, bad);
        }
    }
}
