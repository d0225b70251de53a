package dlockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** A name's hash slot (Slots, DlockClient.slot): Redis Cluster's CLUSTER KEYSLOT, as the server routes it. */
class SlotTest {
    @Test
    void theSlotsAreRedisClusters() {
        Map<String, Integer> want = Map.ofEntries(Map.entry("123456789", 12739), Map.entry("foo", 12182),
                Map.entry("bar", 5061), Map.entry("hello", 866), Map.entry("somekey", 11058),
                Map.entry("foo{hash_tag}", 2515), Map.entry("{user1000}.following", 3443), Map.entry("a{}b", 13694),
                Map.entry("{}{x}", 3257), Map.entry("x{y}{z}", 12222), Map.entry("{", 4092), Map.entry("qux", 9995));
        for (Map.Entry<String, Integer> e : want.entrySet()) {
            assertEquals(e.getValue(), Slots.of(e.getKey()), e.getKey());
            assertEquals(e.getValue(), DlockClient.slot(e.getKey()), e.getKey());
        }
        // CRC16/XMODEM's check value, and a tag is hashed alone
        assertEquals(0x31C3, Slots.crc16("123456789", 0, 9));
        assertEquals(Slots.of("user1000"), Slots.of("{user1000}.followers"));
        assertEquals(Slots.of("qux"), Slots.of("{qux}a"));
        assertEquals(Slots.of("qux"), Slots.of("{qux}b"));
        assertThrows(IllegalArgumentException.class, () -> DlockClient.slot("a b"));
    }

    @Test
    void aMapIsReadAsTheServerSaysIt() {
        Wire.Reply h = Wire.parseReply("OK MAP 7 5 id=j3");
        PartitionMap m = PartitionMap.parse(h, java.util.List.of("part p0 addrs=10.0.0.1:7400,10.0.0.2:7400 floor=0",
                "slots p0 0-5460", "part p1 addrs=- floor=17", "slots p1 5461-5470,5480", "slots p1 5490-16383"));
        assertEquals(7, m.epoch);
        assertEquals(java.util.List.of("p0", "p1"), m.ids);
        assertEquals("10.0.0.1:7400,10.0.0.2:7400", m.addrsOf("p0"));
        assertEquals("", m.addrsOf("p1"));
        assertEquals(null, m.addrsOf("p2"));
        assertEquals(0, m.partOf(0));
        assertEquals(0, m.partOf(5460));
        assertEquals(1, m.partOf(5461));
        assertEquals(1, m.partOf(5480));
        assertEquals(-1, m.partOf(5475));
        assertEquals(-1, m.partOf(5481));
        assertEquals(1, m.partOf(16383));
        assertEquals(0, PartitionMap.parse(Wire.parseReply("OK MAP 0 0"), java.util.List.of()).epoch);
        assertThrows(IllegalArgumentException.class,
                () -> PartitionMap.parse(h, java.util.List.of("part p0 addrs=- floor=0", "slots p0 0-16384")));
    }
}
