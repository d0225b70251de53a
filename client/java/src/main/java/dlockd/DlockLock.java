package dlockd;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A {@link Lock} over one dlockd lock, made by {@link DlockClient#newLock}.
 *
 * <p><b>Reentrant per thread</b>, like {@link ReentrantLock}: the thread that holds it may lock it again (counted
 * locally, nothing is sent) and must unlock it as many times; the last unlock releases the lease. Another thread of
 * the same process waits for the release (the client takes the holds of one name one at a time); other processes
 * wait in the server's queue. Only the holding thread may unlock ({@link IllegalMonitorStateException} otherwise).
 *
 * <p><b>Limits.</b> A distributed lock can be lost while held (its lease expired, was broken, or could not be
 * renewed): {@code Lock} has no way to say so. Check {@link #isValid()} (or {@link #lease()}) before acting on what
 * the lock protects, and pass {@link #token()} to the resource as a fencing token. An unlock after a loss releases the
 * local hold without an error. Failures of the server ({@link UnavailableException}, ...) are thrown unchecked from
 * {@link #lock()} and {@link #tryLock()}. {@link #newCondition()} is not supported.
 */
public final class DlockLock implements Lock {
    private final DlockClient client;
    private final String name;
    private final LockOptions opts;
    private final ReentrantLock mu = new ReentrantLock();
    private Thread holder; // under mu
    private int holds; // under mu
    private Lease lease; // under mu

    DlockLock(DlockClient client, String name, LockOptions opts) {
        this.client = client;
        this.name = name;
        this.opts = opts == null ? LockOptions.DEFAULT : opts;
    }

    private boolean reenter() {
        mu.lock();
        try {
            if (holder == Thread.currentThread()) {
                holds++;
                return true;
            }
            return false;
        } finally {
            mu.unlock();
        }
    }

    private void held(Lease l) {
        mu.lock();
        try {
            holder = Thread.currentThread();
            holds = 1;
            lease = l;
        } finally {
            mu.unlock();
        }
    }

    /** Waits until granted; an interrupt does not stop the wait (the interrupt flag is kept). */
    @Override
    public void lock() {
        if (reenter()) return;
        held(client.lockUninterruptibly(name, opts.waitForever()));
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) throw new InterruptedException();
        if (reenter()) return;
        try {
            held(client.lock(name, opts.waitForever()));
        } catch (DlockInterruptedException x) {
            Thread.interrupted();
            throw new InterruptedException("waiting for " + name);
        }
    }

    /** @return true if the lock was free now (or held by this thread), false if it is busy */
    @Override
    public boolean tryLock() {
        if (reenter()) return true;
        try {
            held(client.tryLock(name, opts));
            return true;
        } catch (BusyException x) {
            return false;
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) throw new InterruptedException();
        if (reenter()) return true;
        try {
            held(client.lock(name, opts.waitFor(Duration.ofNanos(Math.max(0, unit.toNanos(time))))));
            return true;
        } catch (BusyException | LockTimeoutException x) {
            return false;
        } catch (DlockInterruptedException x) {
            Thread.interrupted();
            throw new InterruptedException("waiting for " + name);
        }
    }

    /**
     * Releases one hold of the calling thread; the last releases the lease at the server.
     *
     * @throws IllegalMonitorStateException if the calling thread does not hold the lock
     * @throws UnconfirmedException if the release was not confirmed in time (it goes on being sent)
     */
    @Override
    public void unlock() {
        Lease l;
        mu.lock();
        try {
            if (holder != Thread.currentThread()) throw new IllegalMonitorStateException(name + " is not held by this thread");
            if (--holds > 0) return;
            l = lease;
            holder = null;
            lease = null;
        } finally {
            mu.unlock();
        }
        l.close();
    }

    /** @throws UnsupportedOperationException always: a distributed lock has no conditions */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("dlockd locks have no conditions");
    }

    /** @return whether the calling thread holds the lock (locally; see {@link #isValid()}) */
    public boolean isHeldByCurrentThread() {
        mu.lock();
        try {
            return holder == Thread.currentThread();
        } finally {
            mu.unlock();
        }
    }

    /** @return whether the calling thread holds the lock and its lease is valid now */
    public boolean isValid() {
        Lease l = lease();
        return l != null && l.isValid();
    }

    /** @return the lease of the calling thread's hold, or null if it holds none */
    public Lease lease() {
        mu.lock();
        try {
            return holder == Thread.currentThread() ? lease : null;
        } finally {
            mu.unlock();
        }
    }

    /**
     * @return the fencing token of the calling thread's hold
     * @throws IllegalMonitorStateException if the calling thread does not hold the lock
     */
    public long token() {
        Lease l = lease();
        if (l == null) throw new IllegalMonitorStateException(name + " is not held by this thread");
        return l.token();
    }

    /** @return the lock's name */
    public String name() {
        return name;
    }

    @Override
    public String toString() {
        return "DlockLock[" + name + "]";
    }
}
