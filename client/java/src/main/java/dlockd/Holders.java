package dlockd;

import java.util.List;

/**
 * Every holder (in grant order) and waiter (in queue order) of a lock, with its status.
 *
 * @param status the lock's status (its first holder's values)
 * @param holders the holders listed
 * @param waiters the waiters listed
 * @param more how many the server left out (it lists at most 1000 of each)
 */
public record Holders(Status status, List<Holder> holders, List<Holder> waiters, int more) {
}
