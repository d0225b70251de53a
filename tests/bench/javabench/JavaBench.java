// SPDX-License-Identifier: MIT
//
// JavaBench: the Java client's driver of "make bench-clients" (tests/bench/clients.py), the twin of clientbench.c
// and gobench:
//
//     java -cp dlockd.jar:<classes> JavaBench pairs|handoff <servers> <clients> <seconds>
//
// pairs: each client (a platform thread with a DlockClient of its own: one connection, one owner) takes and
// releases a lock of its own name, wait 0, one after the other. handoff: every client takes ONE lock, waiting for
// it, releases it at once and asks again; the wait of each acquisition is kept. Prints one JSON line: {"ops",
// "secs", "errors", "waits_ms"}. The TTL (10 s) outlives a run: nothing expires.

import dlockd.DlockClient;
import dlockd.DlockException;
import dlockd.Lease;
import dlockd.LockOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

public final class JavaBench {
    static final Duration TTL = Duration.ofSeconds(10);

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 4 || (!args[0].equals("pairs") && !args[0].equals("handoff"))) {
            System.err.println("usage: JavaBench pairs|handoff <servers> <clients> <seconds>");
            System.exit(64);
        }
        boolean handoff = args[0].equals("handoff");
        int n = Integer.parseInt(args[2]);
        double secs = Double.parseDouble(args[3]);
        if (n < 1 || n > 256) {
            System.err.println("javabench: 1 to 256 clients");
            System.exit(64);
        }
        DlockClient[] clients = new DlockClient[n];
        for (int i = 0; i < n; i++) {
            try {
                clients[i] = DlockClient.builder().servers(args[1]).describe(false).build();
            } catch (DlockException e) {
                System.err.println("javabench: connect: " + e.getMessage());
                System.exit(1);
            }
        }
        long pid = ProcessHandle.current().pid();
        long[] ops = new long[n], errs = new long[n];
        List<List<Double>> waits = new ArrayList<>();
        for (int i = 0; i < n; i++) waits.add(new ArrayList<>());
        long t0 = System.nanoTime();
        long end = t0 + (long) (secs * 1e9);
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            int me = i;
            DlockClient c = clients[i];
            String name = handoff ? "h." + pid : "b." + pid + "." + i;
            LockOptions o = handoff ? LockOptions.ttl(TTL) : LockOptions.ttl(TTL).waitFor(Duration.ZERO);
            List<Double> w = waits.get(i);
            threads[i] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long s = System.nanoTime();
                    Lease l;
                    try {
                        l = c.lock(name, o);
                    } catch (DlockException e) {
                        errs[me]++;
                        continue;
                    }
                    if (handoff) w.add((System.nanoTime() - s) / 1e6);
                    try {
                        l.unlock();
                    } catch (DlockException e) {
                        errs[me]++;
                    }
                    ops[me]++;
                }
            }, "javabench-" + i);
            threads[i].start();
        }
        for (Thread t : threads) t.join();
        double took = (System.nanoTime() - t0) / 1e9;
        for (DlockClient c : clients) c.close();
        long sumOps = 0, sumErrs = 0;
        StringBuilder ws = new StringBuilder();
        for (int i = 0; i < n; i++) {
            sumOps += ops[i];
            sumErrs += errs[i];
            for (double x : waits.get(i)) {
                if (ws.length() > 0) ws.append(',');
                ws.append(x);
            }
        }
        System.out.println("{\"ops\":" + sumOps + ",\"secs\":" + took + ",\"errors\":" + sumErrs + ",\"waits_ms\":["
                + ws + "]}");
    }
}
