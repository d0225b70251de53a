package dlockd;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/** One connection's byte stream: a TCP socket (TLS or not) or a unix socket channel. */
abstract class Conn {
    abstract int read(byte[] b) throws IOException;

    abstract void write(byte[] b, int off, int len) throws IOException;

    /** Closes the socket under it without blocking (never a TLS close_notify to a peer that does not read). */
    abstract void close();

    static final class OfSocket extends Conn {
        private final Socket raw;
        private final InputStream in;
        private final OutputStream out;

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
        void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
            out.flush();
        }

        @Override
        void close() {
            try {
                raw.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    static final class OfChannel extends Conn {
        private final SocketChannel ch;

        OfChannel(SocketChannel ch) {
            this.ch = ch;
        }

        @Override
        int read(byte[] b) throws IOException {
            return ch.read(ByteBuffer.wrap(b));
        }

        @Override
        void write(byte[] b, int off, int len) throws IOException {
            ByteBuffer bb = ByteBuffer.wrap(b, off, len);
            while (bb.hasRemaining()) ch.write(bb);
        }

        @Override
        void close() {
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }
}
