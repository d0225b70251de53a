package dlockd;

import java.time.Duration;
import java.util.List;

/**
 * A holder or a waiter of a lock ({@code HOLDERS}), or the holder a {@code NO BUSY} names.
 *
 * @param owner its owner id
 * @param user its user when not the default one, else ""
 * @param waiter true for a waiter, false for a holder
 * @param mode "exclusive" or "shared"
 * @param token a holder's fencing token (unsigned 64-bit)
 * @param ttl a holder's remaining lease; for {@code NO BUSY}, when the first holder in the way is due to leave
 * @param count a holder's reentrant holds
 * @param position a waiter's place (1 is next)
 * @param waitLeft what remains of a waiter's wait; null: forever
 * @param restored a waiter restored after a restart whose owner did not ask again yet
 * @param heldFor how long a holder has held its lease
 * @param host what it said of its machine, or ""
 * @param pid its process id, 0 when not said
 * @param cmd its command, or ""
 * @param value a holder's value ({@link LockOptions#value(String)}), decoded; "" when it has none, and for a waiter
 */
public record Holder(String owner, String user, boolean waiter, String mode, long token, Duration ttl, int count,
        int position, Duration waitLeft, boolean restored, Duration heldFor, String host, int pid, String cmd,
        String value) {

    static Holder of(String s) {
        List<String> w = Wire.fields(s);
        if (w.size() < 2 || !(w.get(0).equals("holder") || w.get(0).equals("waiter"))) return null;
        Wire.Reply r = new Wire.Reply("OK", w.get(0), w.subList(2, w.size()), "");
        String mode = r.kvs("mode");
        if (mode.isEmpty()) mode = "exclusive";
        String wm = r.kvs("wait_ms");
        Duration wait = wm.equals("inf") ? null : Status.ms(wm);
        return new Holder(w.get(1), r.kvs("user"), w.get(0).equals("waiter"), mode, Wire.atou(r.kvs("token")),
                Status.ms(r.kvs("ttl_ms")), Wire.atoi(r.kvs("count")), Wire.atoi(r.kvs("position")), wait,
                w.subList(2, w.size()).contains("restored"), Status.ms(r.kvs("held_ms")),
                Wire.descDecode(r.kvs("host")), Wire.atoi(r.kvs("pid")), Wire.descDecode(r.kvs("cmd")),
                Wire.valueDecode(r.kv("value")));
    }

    static Holder ofBusy(Wire.Reply r) {
        String owner = r.kv("owner");
        if (owner == null) return null;
        return new Holder(owner, r.kvs("user"), false, "", 0, Status.ms(r.arg(1)), 0, 0, Duration.ZERO, false,
                Status.ms(r.kvs("held_ms")), Wire.descDecode(r.kvs("host")), Wire.atoi(r.kvs("pid")),
                Wire.descDecode(r.kvs("cmd")), Wire.valueDecode(r.kv("value")));
    }
}
