package dlockd;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

/**
 * The leases of a multi-lock ({@link DlockClient#lockAll}): one {@link Lease} per name, in byte order of the names.
 * Each is an ordinary lease -- renewed by the client, lost, refreshed, checked and unlocked on its own -- and
 * {@link #unlockAll()} (or {@link #close()}, for try-with-resources) gives them all back at once.
 *
 * <pre>{@code
 * try (Leases ls = client.lockAll(List.of("stock", "orders"), LockOptions.ttl(Duration.ofSeconds(30)))) {
 *     move(ls.get("stock").token(), ls.get("orders").token());
 * }
 * }</pre>
 *
 * <p>Immutable (the leases themselves are thread-safe).
 */
public final class Leases implements AutoCloseable, Iterable<Lease> {
    private final List<Lease> list;

    Leases(List<Lease> list) {
        this.list = list;
    }

    /** @return the leases, one per name, in byte order of the names (unmodifiable) */
    public List<Lease> list() {
        return list;
    }

    /** @return how many leases (names) */
    public int size() {
        return list.size();
    }

    /**
     * @param name a lock name
     * @return its lease, or null when the multi-lock did not name it
     */
    public Lease get(String name) {
        for (Lease l : list) if (l.name().equals(name)) return l;
        return null;
    }

    /** @return the lease of the first name in byte order: the one the server names the multi-lock by */
    public Lease first() {
        return list.get(0);
    }

    @Override
    public Iterator<Lease> iterator() {
        return list.iterator();
    }

    /**
     * True while every lease is valid ({@link Lease#isValid()}): check it right before acting on what the locks
     * protect.
     *
     * @return whether all the leases may be acted on now
     */
    public boolean isValid() {
        for (Lease l : list) if (!l.isValid()) return false;
        return true;
    }

    /**
     * Gives every lease back: the UNLOCKs are all sent, then their replies awaited. Every lease is released (or goes
     * on being released), whatever happens to the others.
     *
     * @throws NotHolderException if the server no longer had a lease (expired or broken), or one was released already
     *     (the first failure; the others are suppressed in it)
     * @throws UnconfirmedException as {@link Lease#unlock()}
     */
    public void unlockAll() {
        List<Lease.Unlock> fs = new ArrayList<>();
        for (Lease l : list) fs.add(l.startUnlock());
        RuntimeException first = null;
        for (int i = 0; i < list.size(); i++) {
            try {
                list.get(i).awaitUnlock(fs.get(i));
            } catch (RuntimeException e) {
                if (first == null) first = e;
                else first.addSuppressed(e);
            }
        }
        if (first != null) throw first;
    }

    /**
     * Releases every lease, for try-with-resources: {@link #unlockAll()}, except that a lease already lost or
     * released, or of a closed client, is no error (nothing is left to release).
     *
     * @throws UnconfirmedException as {@link Lease#unlock()}
     */
    @Override
    public void close() {
        List<Lease.Unlock> fs = new ArrayList<>();
        for (Lease l : list) fs.add(l.startClose());
        RuntimeException first = null;
        for (int i = 0; i < list.size(); i++) {
            if (fs.get(i) == null) continue;
            try {
                list.get(i).awaitClose(fs.get(i));
            } catch (RuntimeException e) {
                if (first == null) first = e;
                else first.addSuppressed(e);
            }
        }
        if (first != null) throw first;
    }

    @Override
    public String toString() {
        return "Leases" + list;
    }
}
