package dlockd;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One connection's byte stream: a TCP or unix socket channel (non-blocking: what is sent is written at once by the
 * thread that sends it, the rest by the reader thread when the socket takes it), or a TLS socket (a writer thread of
 * its own writes it out). Nothing here blocks the thread that sends.
 */
abstract class Conn {
    static final double NEVER = Double.POSITIVE_INFINITY;

    /** Blocks until bytes come (the reader thread): their count, or -1 at the end of the stream. */
    abstract int read(byte[] b) throws IOException;

    /** Writes or queues b without blocking; returns the bytes not yet written. */
    abstract int send(byte[] b, int off, int len) throws IOException;

    /** Since when the oldest bytes not yet written wait (Core.nowMs), or NEVER. */
    abstract double writingSince();

    /** The loop of the writer thread the connection needs, or null (it throws when a write fails). */
    abstract WriterLoop writer();

    /** Closes the socket under it without blocking (never a TLS close_notify to a peer that does not read). */
    abstract void close();

    /** The reader thread ends: what it alone used is freed. */
    void readerDone() { }

    int gen; // the engine's generation of this connection (set before it is published)

    // the line splitter (used by one reader at a time)
    private byte[] lbuf = new byte[4096];
    private int llen;
    final byte[] rbuf = new byte[32768]; // what is read into

    /** Adds n bytes read (in rbuf) and appends the lines they complete to lines. */
    void split(int n, List<String> lines) throws IOException {
        if (llen + n > lbuf.length) lbuf = java.util.Arrays.copyOf(lbuf, Math.max(lbuf.length * 2, llen + n));
        System.arraycopy(rbuf, 0, lbuf, llen, n);
        llen += n;
        int start = 0;
        byte[] buf = lbuf;
        for (int i = 0; i < llen; i++) {
            if (buf[i] != '\n') continue;
            int end = i;
            if (end > start && buf[end - 1] == '\r') end--;
            if (end - start > Wire.REPLY_LINE_MAX) throw new IOException("a line longer than the protocol allows");
            lines.add(new String(buf, start, end - start, StandardCharsets.ISO_8859_1));
            start = i + 1;
        }
        System.arraycopy(buf, start, buf, 0, llen - start);
        llen -= start;
        if (llen > Wire.REPLY_LINE_MAX) throw new IOException("a line longer than the protocol allows");
    }

    interface WriterLoop {
        void run() throws IOException;
    }

    /** TLS over a blocking socket: a writer thread writes what send() queued. */
    static final class OfSocket extends Conn implements WriterLoop {
        private final Socket raw;
        private final InputStream in;
        private final OutputStream out;
        private final ReentrantLock mu = new ReentrantLock();
        private final Condition wake = mu.newCondition();
        private byte[] buf = new byte[4096];
        private int len, unsent;
        private boolean stopped;
        private volatile double writingSince = NEVER;

        OfSocket(Socket raw, Socket layered) throws IOException {
            this.raw = raw;
            this.in = layered.getInputStream();
            this.out = layered.getOutputStream();
        }

        @Override
        int read(byte[] b) throws IOException {
            return in.read(b);
        }

        @Override
        int send(byte[] b, int off, int n) throws IOException {
            mu.lock();
            try {
                if (stopped) throw new IOException("closed");
                if (len + n > buf.length) buf = java.util.Arrays.copyOf(buf, Math.max(buf.length * 2, len + n));
                System.arraycopy(b, off, buf, len, n);
                len += n;
                unsent += n;
                wake.signal();
                return unsent;
            } finally {
                mu.unlock();
            }
        }

        @Override
        double writingSince() {
            return writingSince;
        }

        @Override
        WriterLoop writer() {
            return this;
        }

        @Override
        public void run() throws IOException {
            byte[] o = new byte[4096];
            while (true) {
                int n;
                mu.lock();
                try {
                    while (len == 0 && !stopped) wake.awaitUninterruptibly();
                    if (stopped) return;
                    byte[] t = o;
                    o = buf;
                    buf = t;
                    n = len;
                    len = 0;
                } finally {
                    mu.unlock();
                }
                try {
                    writingSince = Core.nowMs();
                    out.write(o, 0, n);
                    out.flush();
                } finally {
                    writingSince = NEVER; // also after a failed write
                    mu.lock();
                    unsent -= n;
                    mu.unlock();
                }
            }
        }

        @Override
        void close() {
            mu.lock();
            try {
                stopped = true;
                wake.signal();
            } finally {
                mu.unlock();
            }
            try {
                raw.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    /**
     * A non-blocking socket channel: send() writes what the socket takes at once; what it does not take waits in
     * pending, which the reader thread writes out when the selector says the socket is writable.
     */
    static final class OfChannel extends Conn {
        private final SocketChannel ch;
        private final Selector sel;
        private final SelectionKey key;
        private final ReentrantLock wmu = new ReentrantLock();
        private ByteBuffer pending = ByteBuffer.allocate(0); // guarded by wmu, in write mode
        private final ByteBuffer out = ByteBuffer.allocateDirect(8192); // written from (guarded by wmu)
        private volatile double since = NEVER;
        private volatile boolean closed;

        /** ch is connected, non-blocking, and registered with sel (its one key). */
        OfChannel(SocketChannel ch, Selector sel) throws IOException {
            this.ch = ch;
            this.sel = sel;
            SelectionKey k = ch.keyFor(sel);
            if (k == null) k = ch.register(sel, SelectionKey.OP_READ);
            else k.interestOps(SelectionKey.OP_READ);
            this.key = k;
        }

        private boolean selectFirst; // the last read took what there was: wait for more before reading (under rd)

        @Override
        int read(byte[] b) throws IOException {
            while (true) {
                int n = readSome(b, 0);
                if (n != 0) return n;
            }
        }

        /**
         * Reads what comes within timeoutMs (0: no limit, until bytes come or the selector is woken): the count, 0 for
         * none, -1 at the end of the stream. By one thread at a time (Engine.rd).
         */
        int readSome(byte[] b, long timeoutMs) throws IOException {
            if (closed) throw new IOException("closed");
            if (!selectFirst) {
                int n = readDirect(b);
                if (n != 0) {
                    selectFirst = n > 0 && n < b.length;
                    return n;
                }
            }
            selectFirst = false;
            if (since != NEVER) writePending();
            if (timeoutMs <= 0) sel.select();
            else sel.select(timeoutMs);
            sel.selectedKeys().clear();
            if (since != NEVER) writePending();
            if (closed) throw new IOException("closed");
            int n = readDirect(b);
            selectFirst = n > 0 && n < b.length;
            return n;
        }

        private final ByteBuffer in = ByteBuffer.allocateDirect(32768); // read into (no temporary buffer per read)

        private int readDirect(byte[] b) throws IOException {
            in.clear();
            in.limit(Math.min(in.capacity(), b.length));
            int n = ch.read(in);
            if (n > 0) {
                in.flip();
                in.get(b, 0, n);
            }
            return n;
        }

        /** Wakes the thread in readSome. */
        void wakeup() {
            sel.wakeup();
        }

        boolean isClosed() {
            return closed;
        }

        private void writePending() throws IOException {
            wmu.lock();
            try {
                if (pending.position() == 0) return;
                pending.flip();
                try {
                    ch.write(pending);
                } finally {
                    pending.compact();
                }
                if (pending.position() == 0) {
                    since = NEVER;
                    key.interestOps(SelectionKey.OP_READ);
                }
            } finally {
                wmu.unlock();
            }
        }

        @Override
        int send(byte[] b, int off, int n) throws IOException {
            wmu.lock();
            try {
                if (closed) throw new IOException("closed");
                if (pending.position() == 0) {
                    int w = 0;
                    if (n <= out.capacity()) {
                        out.clear();
                        out.put(b, off, n);
                        out.flip();
                        w = ch.write(out);
                    } else {
                        w = ch.write(ByteBuffer.wrap(b, off, n));
                    }
                    if (w == n) return 0;
                    off += w;
                    n -= w;
                    since = Core.nowMs();
                    try {
                        key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                    } catch (java.nio.channels.CancelledKeyException e) {
                        throw new IOException("closed", e);
                    }
                    sel.wakeup();
                }
                if (pending.remaining() < n) {
                    ByteBuffer p = ByteBuffer.allocate(Math.max(pending.capacity() * 2, pending.position() + n + 4096));
                    pending.flip();
                    p.put(pending);
                    pending = p;
                }
                pending.put(b, off, n);
                return pending.position();
            } finally {
                wmu.unlock();
            }
        }

        @Override
        double writingSince() {
            return since;
        }

        @Override
        WriterLoop writer() {
            return null;
        }

        @Override
        void close() {
            closed = true;
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing
            }
            sel.wakeup();
        }

        @Override
        void readerDone() {
            try {
                sel.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }
}
