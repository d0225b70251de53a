package dlockd;

/**
 * A name's hash slot, as the server routes it (proto/slot.c): Redis Cluster's -- CRC16/XMODEM (polynomial 0x1021,
 * initial 0, no reflection) of the name's bytes modulo 16384, or of its tag when it has one: the bytes between the
 * first '{' and the first '}' after it, when at least one byte is between them.
 */
final class Slots {
    static final int COUNT = 16384;
    private static final int[] TABLE = new int[256];

    static {
        for (int i = 0; i < 256; i++) {
            int crc = i << 8;
            for (int b = 0; b < 8; b++) crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
            TABLE[i] = crc & 0xffff;
        }
    }

    private Slots() {
    }

    /** CRC16/XMODEM of s's chars from..to (exclusive), each taken as one byte (names are ASCII). */
    static int crc16(CharSequence s, int from, int to) {
        int crc = 0;
        for (int i = from; i < to; i++) crc = ((crc << 8) ^ TABLE[((crc >>> 8) ^ s.charAt(i)) & 0xff]) & 0xffff;
        return crc;
    }

    /** The slot (0-16383) of name. */
    static int of(String name) {
        int open = name.indexOf('{');
        if (open >= 0) {
            int close = name.indexOf('}', open + 1);
            if (close > open + 1) return crc16(name, open + 1, close) % COUNT;
        }
        return crc16(name, 0, name.length()) % COUNT;
    }
}
