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
 */
public final class Watch implements AutoCloseable {
    static final int QUEUE = 1024;
    private static final WatchEvent END = WatchEvent.of(WatchEvent.Kind.OTHER, "", 0);

    private final Engine c;
    final List<String> patterns; // under the client's lock
    boolean active; // under the client's lock: watch again after a reconnect
    private int missed; // under the client's lock
    private boolean ended; // under the client's lock
    private final LinkedBlockingQueue<WatchEvent> q = new LinkedBlockingQueue<>();
    private volatile boolean over;

    Watch(Engine c, List<String> patterns) {
        this.c = c;
        this.patterns = new ArrayList<>(patterns);
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
            q.add(END);
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
        c.exec(() -> out.addAll(patterns));
        return out;
    }

    /** Ends the watch: UNWATCH what no other watch of the client watches. */
    @Override
    public void close() {
        c.exec(() -> c.unwatch(this));
    }
}
