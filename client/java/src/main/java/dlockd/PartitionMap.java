package dlockd;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The partition map as a daemon said it ({@code MAP}): its epoch, each partition's id and addresses, and which
 * partition serves each slot. Immutable.
 *
 * <pre>
 * OK MAP &lt;epoch&gt; &lt;n&gt;
 * part &lt;partition&gt; addrs=&lt;host:port,...&gt;|- floor=&lt;token&gt;
 * slots &lt;partition&gt; &lt;a&gt;-&lt;b&gt;[,&lt;s&gt;|&lt;a&gt;-&lt;b&gt;...]|-
 * </pre>
 *
 * A partition's ranges may be cut over several {@code slots} lines: their union is its set.
 */
final class PartitionMap {
    static final PartitionMap NONE = new PartitionMap(0, List.of(), List.of(), new short[0]);

    final long epoch;
    final List<String> ids; // the partitions, in the map's order
    final List<String> addrs; // their addresses ("host:port,..."; "" when none is known)
    private final short[] slots; // slot -> index in ids, -1: no partition serves it (empty for epoch 0)

    private PartitionMap(long epoch, List<String> ids, List<String> addrs, short[] slots) {
        this.epoch = epoch;
        this.ids = ids;
        this.addrs = addrs;
        this.slots = slots;
    }

    /** The map of an {@code OK MAP} reply and its body; IllegalArgumentException when a line is not one of a map. */
    static PartitionMap parse(Wire.Reply header, List<String> body) {
        Long epoch = header.uarg(0);
        if (epoch == null) throw new IllegalArgumentException("bad epoch: " + header.text());
        List<String> ids = new ArrayList<>(), addrs = new ArrayList<>();
        short[] slots = new short[Slots.COUNT];
        Arrays.fill(slots, (short) -1);
        for (String line : body) {
            List<String> f = Wire.fields(line);
            if (f.size() < 3 || !(f.get(0).equals("part") || f.get(0).equals("slots"))) {
                continue; // something newer than us
            }
            String id = f.get(1);
            int i = ids.indexOf(id);
            if (i < 0) {
                if (ids.size() >= Short.MAX_VALUE) throw new IllegalArgumentException("too many partitions");
                ids.add(id);
                addrs.add("");
                i = ids.size() - 1;
            }
            if (f.get(0).equals("part")) {
                for (String w : f.subList(2, f.size())) {
                    if (w.startsWith("addrs=")) addrs.set(i, w.equals("addrs=-") ? "" : w.substring(6));
                }
                continue;
            }
            String ranges = f.get(2);
            if (ranges.equals("-")) continue;
            for (String r : ranges.split(",", -1)) {
                int dash = r.indexOf('-');
                int a = slotOf(dash < 0 ? r : r.substring(0, dash), line);
                int b = dash < 0 ? a : slotOf(r.substring(dash + 1), line);
                if (b < a) throw new IllegalArgumentException("bad range '" + r + "': " + line);
                for (int s = a; s <= b; s++) slots[s] = (short) i;
            }
        }
        if (epoch == 0) return NONE;
        return new PartitionMap(epoch, List.copyOf(ids), List.copyOf(addrs), slots);
    }

    private static int slotOf(String s, String line) {
        Long n = Wire.parseU64(s);
        if (n == null || n >= Slots.COUNT) throw new IllegalArgumentException("bad slot '" + s + "': " + line);
        return (int) (long) n;
    }

    /** @return the index (in ids) of the partition that serves slot, or -1 */
    int partOf(int slot) {
        return slots.length == 0 ? -1 : slots[slot];
    }

    /** @return the addresses of partition id ("host:port,..."), "" when none is known, null when the map has no such partition */
    String addrsOf(String id) {
        int i = ids.indexOf(id);
        return i < 0 ? null : addrs.get(i);
    }

    @Override
    public String toString() {
        return "PartitionMap[epoch " + epoch + ", " + ids + " at " + addrs + "]";
    }
}
