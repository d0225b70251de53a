package dlockd;

import java.time.Duration;

/**
 * A lock as {@code STATUS} describes it; {@code token}, {@code ttl}, {@code count} and {@code owner} are its first
 * holder's (the one granted first).
 *
 * @param name the lock's name
 * @param held whether anybody holds it
 * @param token the first holder's fencing token (unsigned 64-bit; 0 when free)
 * @param ttl what remains of the first holder's lease
 * @param count its reentrant holds
 * @param owner its owner id, "" when free
 * @param user the owner's user when not the default one, else ""
 * @param waiters queued requests
 * @param mode "exclusive", "shared", "semaphore"; "" when free
 * @param limit the lock's limit
 * @param holders how many hold it now
 * @param heldFor how long the first holder has held it
 * @param host what the first holder said of its machine (HELLO host=), or ""
 * @param pid its process id, 0 when not said
 * @param cmd its command, or ""
 * @param delay the lock's lock-delay (0: none)
 * @param delayLeft what is left of the delay while it runs
 * @param closed how long grants stay closed (the server's Redis forgot leases), 0 normally
 * @param value the first holder's value ({@link LockOptions#value(String)}: an elected leader's), decoded; "" when it
 *     has none
 */
public record Status(String name, boolean held, long token, Duration ttl, int count, String owner, String user,
        int waiters, String mode, int limit, int holders, Duration heldFor, String host, int pid, String cmd,
        Duration delay, Duration delayLeft, Duration closed, String value) {

    static Duration ms(String v) {
        return Duration.ofMillis(Wire.atoi(v));
    }

    static Status of(String name, Wire.Reply r) {
        String owner = r.kvs("owner"), mode = r.kvs("mode");
        if (owner.equals("-")) owner = "";
        if (mode.equals("-")) mode = "";
        int limit = Wire.atoi(r.kvs("limit"));
        if (limit == 0) limit = 1;
        return new Status(name, r.kvs("state").equals("held"), Wire.atou(r.kvs("token")), ms(r.kvs("ttl_ms")),
                Wire.atoi(r.kvs("count")), owner, r.kvs("user"), Wire.atoi(r.kvs("waiters")), mode, limit,
                Wire.atoi(r.kvs("holders")), ms(r.kvs("held_ms")), Wire.descDecode(r.kvs("host")),
                Wire.atoi(r.kvs("pid")), Wire.descDecode(r.kvs("cmd")), ms(r.kvs("delay_ms")),
                ms(r.kvs("delay_left_ms")), ms(r.kvs("closed_ms")), Wire.valueDecode(r.kv("value")));
    }

    Status withFirst(Holder f, boolean isHeld) {
        if (f == null) return new Status(name, isHeld, token, ttl, count, owner, user, waiters, mode, limit, holders,
                heldFor, host, pid, cmd, delay, delayLeft, closed, value);
        return new Status(name, isHeld, f.token(), f.ttl(), f.count(), f.owner(), f.user(), waiters, mode, limit,
                holders, f.heldFor(), f.host(), f.pid(), f.cmd(), delay, delayLeft, closed, f.value());
    }
}
