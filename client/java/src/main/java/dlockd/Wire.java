package dlockd;

import java.util.ArrayList;
import java.util.List;

/** The line codec of the dlockd protocol (proto/PROTOCOL.md): request lines out, reply and event lines in, value checks. */
final class Wire {
    private Wire() {}

    static final int NAME_MAX = 255;
    static final int OWNER_MAX = 64;
    static final int REASON_MAX = 128; // a BREAK's reason= (DL_REASON_MAX)
    static final int KEY_MIN = 16;
    static final int KEY_MAX = 64;
    static final int DESC_HOST_MAX = 64;
    static final int DESC_CMD_MAX = 128;
    /** A lease's value (LOCK/REFRESH value=), in bytes as sent: a space or '%' takes three (DL_VALUE_MAX). */
    static final int VALUE_MAX = 128;
    static final int LIMIT_MAX = 1024;
    static final long DURATION_MAX_MS = 1_000_000_000_000L;
    /** A line from the server longer than this (without its LF) is a protocol error. */
    static final int REPLY_LINE_MAX = 65536;
    static final int DEFAULT_PORT = 7420;
    static final double DEFAULT_TTL_MS = 30000;
    static final int BODY_LINES_MAX = 2 * 1000 + 1000 + 128;
    static final int REENTRY_MAX = (1 << 24) - 1;
    static final int SERVERS_MAX = 8;
    /** The most names of one multi-lock (LOCK a b ...; DL_MULTI_MAX). */
    static final int MULTI_MAX = 64;
    /** A request line's most bytes, its line ending not counted. */
    static final int REQUEST_LINE_MAX = 1024;

    static boolean printableWord(String s) {
        if (s == null || s.isEmpty()) return false;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < '!' || c > '~') return false;
        }
        return true;
    }

    static void checkName(String name, String what) {
        if (name == null || name.length() < 1 || name.length() > NAME_MAX || !printableWord(name) || name.indexOf('=') >= 0) {
            throw new IllegalArgumentException("bad " + what + " '" + name + "': 1-" + NAME_MAX
                    + " printable ASCII characters, no space or '='");
        }
    }

    /** A name, or a prefix followed by '*' ("*" alone: every lock). */
    static void checkPattern(String p) {
        if ("*".equals(p)) return;
        if (p != null && p.endsWith("*")) p = p.substring(0, p.length() - 1);
        checkName(p, "watch pattern");
    }

    static void checkOwner(String o) {
        if (o == null || o.length() < 1 || o.length() > OWNER_MAX || !printableWord(o) || o.indexOf('=') >= 0) {
            throw new IllegalArgumentException("bad owner id '" + o + "': 1-" + OWNER_MAX + " printable ASCII characters, no space or '='");
        }
    }

    static void checkKey(String k) {
        boolean ok = k.length() >= KEY_MIN && k.length() <= KEY_MAX;
        for (int i = 0; ok && i < k.length(); i++) {
            char c = k.charAt(i);
            ok = c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        }
        if (!ok) throw new IllegalArgumentException("bad owner key: " + KEY_MIN + " to " + KEY_MAX + " letters, digits, - or _");
    }

    static void checkUser(String u) {
        boolean ok = u.length() >= 1 && u.length() <= 32;
        for (int i = 0; ok && i < u.length(); i++) {
            char c = u.charAt(i);
            ok = c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        }
        if (!ok) throw new IllegalArgumentException("bad user name '" + u + "': 1-32 letters, digits, . _ -");
    }

    static void checkCluster(String id) {
        boolean ok = id.length() == 32;
        for (int i = 0; ok && i < id.length(); i++) {
            char c = id.charAt(i);
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        }
        if (!ok) throw new IllegalArgumentException("bad cluster id '" + id + "': 32 hex digits");
    }

    /**
     * A text value as it is sent (a description's, HELLO host= and cmd=, or a lease's value=; proto/desc.c
     * dl_desc_encode): of the text's UTF-8 bytes, printable ASCII is kept, a space and '%' are escaped (%20, %25), any
     * other byte is '?'; cut at max bytes, never inside an escape.
     */
    static String descEncode(String text, int max) {
        StringBuilder b = new StringBuilder();
        for (byte x : text.getBytes(java.nio.charset.StandardCharsets.UTF_8)) {
            int c = x & 0xff;
            String e;
            if (c == ' ' || c == '%') e = String.format("%%%02X", c);
            else if (c >= '!' && c <= '~') e = String.valueOf((char) c);
            else e = "?";
            if (b.length() + e.length() > max) break;
            b.append(e);
        }
        return b.toString();
    }

    /** A lease's value as the server says it (value=), decoded; "" when absent or longer than a value may be. */
    static String valueDecode(String v) {
        return v == null || v.length() > VALUE_MAX ? "" : descDecode(v);
    }

    /** What a description's value says, for people. */
    static String descDecode(String v) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < v.length(); i++) {
            char c = v.charAt(i);
            if (c == '%' && i + 2 < v.length() + 0 && i + 2 <= v.length() - 1) {
                try {
                    int n = Integer.parseInt(v.substring(i + 1, i + 3), 16);
                    if (n >= 0x20 && n <= 0x7e) {
                        b.append((char) n);
                        i += 2;
                        continue;
                    }
                } catch (NumberFormatException ignored) {
                    // shown as it is
                }
            }
            b.append(c >= ' ' && c <= '~' ? c : '?');
        }
        return b.toString();
    }

    /** Builds one request line. */
    static final class Line {
        private final StringBuilder b = new StringBuilder();

        Line(String verb, String... words) {
            b.append(verb);
            for (String w : words) b.append(' ').append(w);
        }

        Line kv(String k, String v) {
            if (v != null && !v.isEmpty()) b.append(' ').append(k).append('=').append(v);
            return this;
        }

        String build(String tag) {
            kv("id", tag);
            b.append("\r\n");
            return b.toString();
        }
    }

    /** One line from the server: kind OK, NO, ERR or "*" (an event), word, args (the tag taken off). */
    static final class Reply {
        final String kind;
        final String word;
        final List<String> args;
        final String tag;

        Reply(String kind, String word, List<String> args, String tag) {
            this.kind = kind;
            this.word = word;
            this.args = args;
            this.tag = tag;
        }

        /** The value of key=, or null. */
        String kv(String key) {
            int k = key.length();
            for (int i = 0, n = args.size(); i < n; i++) {
                String a = args.get(i);
                if (a.length() > k && a.charAt(k) == '=' && a.startsWith(key)) return a.substring(k + 1);
            }
            return null;
        }

        String kvs(String key) {
            String v = kv(key);
            return v == null ? "" : v;
        }

        boolean is(String k, String w) {
            return kind.equals(k) && word.equals(w);
        }

        String arg(int i) {
            return i < args.size() ? args.get(i) : null;
        }

        /** args[i] as an unsigned decimal 64-bit number, or null. */
        Long uarg(int i) {
            return parseU64(arg(i));
        }

        String text() {
            StringBuilder b = new StringBuilder(kind).append(' ').append(word);
            for (String a : args) b.append(' ').append(a);
            return b.toString();
        }
    }

    static List<String> fields(String s) {
        List<String> out = new ArrayList<>();
        int i = 0, n = s.length();
        while (i < n) {
            while (i < n && (s.charAt(i) == ' ' || s.charAt(i) == '\t')) i++;
            int j = i;
            while (j < n && s.charAt(j) != ' ' && s.charAt(j) != '\t') j++;
            if (j > i) out.add(s.substring(i, j));
            i = j;
        }
        return out;
    }

    /** Parses a reply or event line; null if it is not protocol (one pass: fields split, characters checked). */
    static Reply parseReply(String s) {
        int n = s.length();
        String kind = null, word = null;
        List<String> args = new ArrayList<>(6);
        int i = 0;
        while (i < n) {
            char c = s.charAt(i);
            if (c == ' ' || c == '\t') {
                i++;
                continue;
            }
            int j = i;
            for (; j < n; j++) {
                c = s.charAt(j);
                if (c == ' ' || c == '\t') break;
                if (c < ' ' || c > '~') return null;
            }
            String f = s.substring(i, j);
            if (kind == null) kind = f;
            else if (word == null) word = f;
            else args.add(f);
            i = j;
        }
        if (word == null) return null;
        switch (kind) {
            case "OK": case "NO": case "ERR": case "*":
                break;
            default:
                return null;
        }
        String tag = "";
        if (!args.isEmpty() && args.get(args.size() - 1).startsWith("id=")) {
            tag = args.remove(args.size() - 1).substring(3);
        }
        return new Reply(kind, word, args, tag);
    }

    /** An unsigned decimal u64 (as a long's bits), or null. */
    static Long parseU64(String s) {
        if (s == null || s.isEmpty() || s.length() > 20) return null;
        for (int i = 0; i < s.length(); i++) if (s.charAt(i) < '0' || s.charAt(i) > '9') return null;
        try {
            return Long.parseUnsignedLong(s);
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /**
     * Whether a server of this version (HELLO's {@code version=X.Y.Z}) takes request ids ({@code LOCK req=}): 0.4.0
     * or later, X > 0 or Y >= 4. A server of 0.3 refuses the option; no version is taken for an old one.
     */
    static boolean takesReq(String version) {
        if (version == null) return false;
        int i = 0, n = version.length();
        long major = 0, minor = 0;
        while (i < n && version.charAt(i) >= '0' && version.charAt(i) <= '9' && major < 1000) major = major * 10 + (version.charAt(i++) - '0');
        if (i == 0 || i >= n || version.charAt(i++) != '.') return false;
        int j = i;
        while (i < n && version.charAt(i) >= '0' && version.charAt(i) <= '9' && minor < 1000) minor = minor * 10 + (version.charAt(i++) - '0');
        if (i == j) return false;
        return major > 0 || minor >= 4;
    }

    static int atoi(String s) {
        if (s == null) return 0;
        try {
            int n = Integer.parseInt(s);
            return Math.max(n, 0);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    static long atou(String s) {
        Long v = parseU64(s);
        return v == null ? 0 : v;
    }

    static String u64(long v) {
        return Long.toUnsignedString(v);
    }

    static String trunc(String s) {
        return s.length() > 80 ? s.substring(0, 80) + "..." : s;
    }

    /** A duration in whole milliseconds for the wire (at least 1). */
    static long durMs(java.time.Duration d) {
        long ns;
        try {
            ns = d.toNanos();
        } catch (ArithmeticException e) {
            return DURATION_MAX_MS;
        }
        long m = (ns + 999_999) / 1_000_000;
        if (m < 1) m = 1;
        if (m > DURATION_MAX_MS) m = DURATION_MAX_MS;
        return m;
    }
}
