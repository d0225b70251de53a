package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The README's example, run. */
@Timeout(20)
class ExampleTest {
    /** A store fenced by tokens: it refuses a writer with a token below the largest it has seen. */
    static final class Store {
        long largest;
        final List<String> items = new ArrayList<>();

        void write(String item, long token) {
            if (Long.compareUnsigned(token, largest) < 0) throw new IllegalStateException("stale token " + token);
            largest = token;
            items.add(item);
        }
    }

    @Test
    void example() {
        try (Daemons ds = new Daemons()) {
            Daemons.Proc d = ds.dlockd();
            List<String> items = List.of("apples", "pears");
            Store store = new Store();

            try (DlockClient client = DlockClient.builder()
                    .servers(d.addr)   // or DLOCK_SERVERS, DLOCK_SOCKET, ...
                    .owner("restock")
                    .build();
                 Lease lease = client.lock("stock", Duration.ofSeconds(30), Duration.ofMinutes(1))) {
                // (LockTimeoutException above: not granted within a minute.)

                // Stop when the lease is lost: the listener runs on a client thread
                // before the lease's local deadline, so before the server could grant
                // the lock to anyone else.
                AtomicBoolean stop = new AtomicBoolean();
                lease.onLost(lost -> stop.set(true));

                for (String item : items) {
                    // Before each write to what the lock protects: still held? And pass
                    // the fencing token along, so that the store refuses a stale holder.
                    if (stop.get() || !lease.isValid()) break;
                    store.write(item, lease.token());
                }
            }   // close() = unlock(); a lease already lost is no error there

            assertEquals(items, store.items);
        }
    }
}
