package dlockd;

/**
 * A failure of the dlockd client: the base of every exception the client throws (unchecked).
 *
 * <p>Each failure has a {@link Kind}; the subclasses ({@link BusyException}, {@link LockTimeoutException},
 * {@link LeaseLostException}, ...) let callers catch one kind. When the server refused a request, {@link #code()}
 * is its code word ({@code "BUSY"}, {@code "NOT_HOLDER"}, {@code "UNAVAILABLE"}, ...) and {@link #serverLine()} its
 * whole line; programs match the kind or the code, the text is for people.
 *
 * <p>Arguments the client can check itself (a bad lock name, owner id, pattern, option) are refused before anything
 * is sent with {@link IllegalArgumentException}, never with a {@code DlockException}.
 */
public class DlockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** What went wrong; see the subclasses. */
    public enum Kind {
        /** The lock is busy ({@code NO BUSY}): {@link BusyException}. */
        BUSY,
        /** The wait ran out, or no reply came within the server timeout: {@link LockTimeoutException}. */
        TIMEOUT,
        /** {@code NO NOT_HOLDER}: {@link NotHolderException}. */
        NOT_HOLDER,
        /** The lease is gone, or {@code CHECK} said {@code STALE}: {@link LeaseLostException}. */
        LOST,
        /** No server answers, {@code ERR UNAVAILABLE}, {@code ERR NOT_ACTIVE}: {@link UnavailableException}. */
        UNAVAILABLE,
        /** No server of the client's cluster: {@link ClusterMismatchException} (also an {@link UnavailableException}). */
        CLUSTER_MISMATCH,
        /** {@code NO DENIED}, {@code NO AUTH_FAILED}, {@code ERR NOAUTH}: {@link DeniedException}. */
        DENIED,
        /** The client was closed: {@link ClientClosedException}. */
        CLOSED,
        /** The connection closed under a request that may not be sent twice: {@link ConnectionLostException}. */
        CONNECTION_LOST,
        /**
         * The lease is held by the same owner in another process, or a multi-lock names a lock its owner holds
         * ({@code NO ALREADY_HELD}): {@link HeldByOwnerException}.
         */
        HELD_BY_OWNER,
        /** {@code NO LIMIT_MISMATCH}: {@link LimitMismatchException}. */
        LIMIT_MISMATCH,
        /** {@code NO UPGRADE_DEADLOCK}: {@link UpgradeDeadlockException}. */
        UPGRADE_DEADLOCK,
        /** {@code NO DEADLOCK}: {@link DeadlockException}. */
        DEADLOCK,
        /** {@code ERR LIMIT}: {@link LimitException}. */
        LIMIT,
        /** The server said what no server may: {@link DlockProtocolException}. */
        PROTOCOL,
        /** Any other {@code NO} or {@code ERR}: a plain {@code DlockException}. */
        SERVER,
        /** An unlock that was sent but not confirmed in time: {@link UnconfirmedException}. */
        UNCONFIRMED,
        /** The calling thread was interrupted while it waited: {@link DlockInterruptedException}. */
        INTERRUPTED,
        /**
         * {@code NO MOVED}: another partition serves the name, and the client gave up following it:
         * {@link MovedException}.
         */
        MOVED
    }

    /** The kind. */
    private final Kind kind;
    /** The server's code word, or null. */
    private final String code;
    /** The server's line, or null. */
    private final String serverLine;

    /**
     * @param kind the kind
     * @param code the server's code word, or null
     * @param serverLine the server's line, or null
     * @param message what happened, for people
     */
    public DlockException(Kind kind, String code, String serverLine, String message) {
        super(format(kind, serverLine, message));
        this.kind = kind;
        this.code = code;
        this.serverLine = serverLine;
    }

    private static String format(Kind kind, String line, String msg) {
        StringBuilder b = new StringBuilder("dlockd: ").append(kind.name().toLowerCase(java.util.Locale.ROOT).replace('_', ' '));
        if (msg != null && !msg.isEmpty()) b.append(": ").append(msg);
        if (line != null && !line.isEmpty() && !line.equals(msg)) b.append(" (").append(line).append(')');
        return b.toString();
    }

    /** @return the kind of failure */
    public Kind kind() {
        return kind;
    }

    /** @return the server's code word ({@code "BUSY"}, {@code "UNAVAILABLE"}, ...), or null when the server said nothing */
    public String code() {
        return code;
    }

    /** @return the server's whole line ({@code "NO BUSY orders/42 2710 ..."}), or null */
    public String serverLine() {
        return serverLine;
    }

    /** The exception for a kind, of its subclass. */
    static DlockException of(Kind kind, String code, String line, String msg) {
        switch (kind) {
            case BUSY: return new BusyException(code, line, msg, null);
            case TIMEOUT: return new LockTimeoutException(msg);
            case NOT_HOLDER: return new NotHolderException(code, line, msg);
            case LOST: return new LeaseLostException(code, line, msg, LostReason.NOT_LOST, null);
            case UNAVAILABLE: return new UnavailableException(code, line, msg);
            case CLUSTER_MISMATCH: return new ClusterMismatchException(msg);
            case DENIED: return new DeniedException(code, line, msg);
            case CLOSED: return new ClientClosedException(msg);
            case CONNECTION_LOST: return new ConnectionLostException(msg);
            case HELD_BY_OWNER: return new HeldByOwnerException(code, line, msg);
            case LIMIT_MISMATCH: return new LimitMismatchException(code, line, msg, 0);
            case UPGRADE_DEADLOCK: return new UpgradeDeadlockException(code, line, msg);
            case DEADLOCK: return new DeadlockException(code, line, msg, 0);
            case LIMIT: return new LimitException(code, line, msg);
            case PROTOCOL: return new DlockProtocolException(msg);
            case UNCONFIRMED: return new UnconfirmedException(msg);
            case INTERRUPTED: return new DlockInterruptedException(msg);
            case MOVED: return new MovedException(code, line, msg, null, null, 0);
            default: return new DlockException(kind, code, line, msg);
        }
    }

    static DlockException of(Kind kind, String msg) {
        return of(kind, null, null, msg);
    }

    /** The exception of a NO or ERR reply. */
    static DlockException ofReply(Wire.Reply r) {
        return ofWord(r.kind.equals("NO"), r.word, r.args, r.text());
    }

    /**
     * The exception of {@code * FAILED <first> <WORD> <rest...>}: a multi-lock that waited ended without its locks,
     * as a single LOCK of the failing name would have been answered {@code NO <WORD> <rest>} or
     * {@code ERR <WORD> <rest>} (DEADLOCK: {@link DeadlockException}; UNAVAILABLE: {@link UnavailableException};
     * EXPIRED, a lock it had taken was ended meanwhile: a plain {@code DlockException} of code {@code "EXPIRED"};
     * MOVED, the slot of its names went to another partition: a {@link MovedException} that names none).
     */
    static DlockException ofFailed(Wire.Reply r) {
        String word = r.args.get(1);
        // MOVED <name>: the name it waited for went to another partition (its place waits there); the map says which
        if (word.equals("MOVED")) return new MovedException(word, r.text(), null, "", "", 0);
        boolean no;
        switch (word) {
            case "UNAVAILABLE": case "NOT_ACTIVE": case "LIMIT": case "NOAUTH": case "INTERNAL":
                no = false;
                break;
            default:
                no = true;
        }
        return ofWord(no, word, r.args.subList(2, r.args.size()), r.text());
    }

    /** The exception of a NO (no) or ERR refusal with this code word and these values (the line: for people). */
    private static DlockException ofWord(boolean no, String word, java.util.List<String> args, String line) {
        Kind kind = Kind.SERVER;
        if (no) {
            switch (word) {
                case "BUSY": kind = Kind.BUSY; break;
                case "NOT_HOLDER": kind = Kind.NOT_HOLDER; break;
                case "STALE": kind = Kind.LOST; break;
                case "AUTH_FAILED": case "DENIED": kind = Kind.DENIED; break;
                case "LIMIT_MISMATCH": kind = Kind.LIMIT_MISMATCH; break;
                case "UPGRADE_DEADLOCK": kind = Kind.UPGRADE_DEADLOCK; break;
                case "DEADLOCK": kind = Kind.DEADLOCK; break;
                case "ALREADY_HELD": kind = Kind.HELD_BY_OWNER; break;
                case "MOVED": return MovedException.of(word, line, args);
                default: break;
            }
        } else {
            switch (word) {
                case "NOAUTH": kind = Kind.DENIED; break;
                case "UNAVAILABLE": case "NOT_ACTIVE": kind = Kind.UNAVAILABLE; break;
                case "LIMIT": kind = Kind.LIMIT; break;
                default: break;
            }
        }
        String a1 = args.size() > 1 ? args.get(1) : null;
        if (kind == Kind.LIMIT_MISMATCH) return new LimitMismatchException(word, line, null, Wire.atoi(a1));
        if (kind == Kind.BUSY) return new BusyException(word, line, null, Holder.ofBusy(new Wire.Reply("NO", word, args, "")));
        if (kind == Kind.LOST) return new LeaseLostException(word, line, null, LostReason.NOT_LOST, null);
        if (kind == Kind.DEADLOCK) return new DeadlockException(word, line, null, Wire.atoi(a1));
        return of(kind, word, line, null);
    }
}
