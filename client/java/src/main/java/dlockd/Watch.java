package dlockd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * News of locks one does not hold (see {@link DlockClient#watch(String...)}): read events with {@link #take()} or
 * {@link #poll(Duration)}; {@link #close()} ends the watch. Events queue up to 1024; a reader too slow for that misses
 * events, told by an {@link WatchEvent.Kind#OVERFLOW} event. Thread-safe.
 *
 * <p>On a partitioned service a watch of lock names of several partitions is made of one watch per connection (its
 * parts), whose events come to this one queue; it is over once every part is.
 */
public final class Watch implements AutoCloseable {
    static final int QUEUE = 1024;
    private static final WatchEvent END = WatchEvent.of(WatchEvent.Kind.OTHER, "", 0);

    private final Engine c; // null: a watch made of parts
    private final Watch sink; // a part: the watch its events go to
    final List<String> patterns; // under the client's lock
    boolean active; // under the client's lock: watch again after a reconnect
    private int missed; // under the client's lock (of a watch made of parts: under smu)
    private boolean ended; // under the client's lock (of a watch made of parts: under smu)
    private final LinkedBlockingQueue<WatchEvent> q = new LinkedBlockingQueue<>();
    private volatile boolean over;
    // a watch made of parts
    private final List<Watch> parts = new java.util.concurrent.CopyOnWriteArrayList<>();
    private final java.util.concurrent.locks.ReentrantLock smu = new java.util.concurrent.locks.ReentrantLock();
    private int left; // its parts not over (under smu)
    private boolean sealed; // every part is added (under smu)

    Watch(Engine c, List<String> patterns) {
        this(c, null, patterns);
    }

    /** A watch of client c, whose events go to sink when it is a part of it (sink null: its own). */
    Watch(Engine c, Watch sink, List<String> patterns) {
        this.c = c;
        this.sink = sink;
        this.patterns = new ArrayList<>(patterns);
    }

    /** A watch made of parts ({@link #addPart}, then {@link #seal}): the patterns of several partitions. */
    static Watch ofParts(List<String> patterns) {
        return new Watch(null, null, patterns);
    }

    void addPart(Watch w) {
        smu.lock();
        try {
            parts.add(w);
            left++;
        } finally {
            smu.unlock();
        }
    }

    /** Every part is added: the watch is over once they all are. */
    void seal() {
        smu.lock();
        try {
            sealed = true;
            if (left == 0) endParts();
        } finally {
            smu.unlock();
        }
    }

    private void partEnded() {
        smu.lock();
        try {
            left--;
            if (sealed && left == 0) endParts();
        } finally {
            smu.unlock();
        }
    }

    private void endParts() {
        if (!ended) {
            ended = true;
            q.add(END);
        }
    }

    /** An event of a part (under its client's lock): into this queue, under smu. */
    private void deliverOfPart(WatchEvent ev) {
        smu.lock();
        try {
            queue(ev);
        } finally {
            smu.unlock();
        }
    }

    boolean matches(String name) {
        for (String p : patterns) {
            if (p.endsWith("*") ? name.startsWith(p.substring(0, p.length() - 1)) : p.equals(name)) return true;
        }
        return false;
    }

    boolean has(String p) {
        return patterns.contains(p);
    }

    /** Never blocks under the client's lock: a full queue counts the event missed, told by an OVERFLOW once there is room. */
    void deliver(WatchEvent ev) {
        if (sink != null) {
            if (!ended) sink.deliverOfPart(ev);
            return;
        }
        queue(ev);
    }

    private void queue(WatchEvent ev) {
        if (ended) return;
        if (missed > 0) {
            if (q.size() >= QUEUE) {
                missed++;
                return;
            }
            q.add(WatchEvent.of(WatchEvent.Kind.OVERFLOW, "", missed));
            missed = 0;
        }
        if (q.size() >= QUEUE) missed++;
        else q.add(ev);
    }

    void end() {
        if (!ended) {
            ended = true;
            if (sink != null) sink.partEnded();
            else q.add(END);
        }
    }

    /**
     * Waits for the next event.
     *
     * @return the event
     * @throws InterruptedException if interrupted while waiting
     * @throws ClientClosedException once the watch is over (closed, refused, or the client closed) and drained
     */
    public WatchEvent take() throws InterruptedException {
        if (over) throw new ClientClosedException("the watch is over");
        WatchEvent e = q.take();
        if (e == END) {
            over = true;
            q.add(END);
            throw new ClientClosedException("the watch is over");
        }
        return e;
    }

    /**
     * Waits at most d for the next event.
     *
     * @param d how long to wait
     * @return the event, or null if none came in time
     * @throws InterruptedException if interrupted while waiting
     * @throws ClientClosedException once the watch is over and drained
     */
    public WatchEvent poll(Duration d) throws InterruptedException {
        if (over) throw new ClientClosedException("the watch is over");
        WatchEvent e = q.poll(d.toNanos(), TimeUnit.NANOSECONDS);
        if (e == END) {
            over = true;
            q.add(END);
            throw new ClientClosedException("the watch is over");
        }
        return e;
    }

    /** @return the patterns still watched */
    public List<String> patterns() {
        List<String> out = new ArrayList<>();
        if (c == null) {
            for (Watch w : parts) out.addAll(w.patterns());
            return out;
        }
        c.exec(() -> out.addAll(patterns));
        return out;
    }

    /** Ends the watch: UNWATCH what no other watch of the client watches. */
    @Override
    public void close() {
        if (c == null) {
            for (Watch w : parts) w.close();
            seal();
            return;
        }
        c.exec(() -> c.unwatch(this));
    }
}
