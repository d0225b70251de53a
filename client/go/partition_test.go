// partition_test.go: the client against a partitioned service -- three
// real dlockd daemons, partitions p0, p1 and p2, on one real
// redis-server (spec_routing.md) -- and the slot function.

package dlockd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Redis's CLUSTER KEYSLOT.
func TestSlotVectors(t *testing.T) {
	for name, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "bar": 5061, "hello": 866, "somekey": 11058,
		"foo{hash_tag}": 2515, "{user1000}.following": 3443, "a{}b": 13694, "{}{x}": 3257,
		"x{y}{z}": 12222, "{": 4092, "qux": 9995,
		"{qux}a": 9995, "{qux}b": 9995, "}{qux}": 9995, "": 0,
	} {
		if got := slotOf(name); got != want {
			t.Errorf("slot of %q: %d, want %d", name, got, want)
		}
	}
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("CRC16/XMODEM of 123456789: %#x, want 0x31c3", got)
	}
}

func TestParseMap(t *testing.T) {
	h := parseReply("OK MAP 7 5")
	m, err := parseMap(h, []string{
		"part p0 addrs=10.0.0.1:7400,10.0.0.2:7400 floor=0",
		"slots p0 0-5460,16383",
		"part p1 addrs=- floor=1796057220000000000",
		"slots p1 5461-9000",
		"slots p1 9001-16382",
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.epoch != 7 || len(m.parts) != 2 || m.parts[0].addrs != "10.0.0.1:7400,10.0.0.2:7400" || m.parts[1].addrs != "" ||
		m.parts[1].floor != 1796057220000000000 {
		t.Fatalf("map %+v", m.parts)
	}
	for s, want := range map[int]int16{0: 0, 5460: 0, 5461: 1, 9000: 1, 9001: 1, 16382: 1, 16383: 0} {
		if m.owner[s] != want {
			t.Errorf("slot %d: partition %d, want %d", s, m.owner[s], want)
		}
	}
	for _, bad := range [][]string{
		{"slots p0 0-10"}, // an unknown partition
		{"part p0 addrs=- floor=0", "slots p0 10-5"},                                         // a range backwards
		{"part p0 addrs=- floor=0", "slots p0 16384"},                                        // past the last slot
		{"part p0 addrs=- floor=0", "part p0 addrs=- floor=0"},                               // twice
		{"part p0 addrs=- floor=0", "part p1 addrs=- floor=0", "slots p0 1-5", "slots p1 5"}, // two for one slot
	} {
		if _, err := parseMap(h, bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v, want ErrProtocol", bad, err)
		}
	}
}

// partitioned: three daemons of partitions p0, p1, p2 on one Redis, the
// map made on p0 and p0's slots 5461-16383 given to p1 and p2 as Redis
// Cluster's three masters share them.
type partitioned struct {
	d     [3]*proc
	epoch uint64 // the map's after the moves
	early *Client
}

// mapOf is MAP's answer from addr: its epoch and lines.
func mapOf(t *testing.T, addr string) (uint64, []string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	fmt.Fprintf(c, "MAP\r\n")
	read := func() string {
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("MAP from %s: %v", addr, err)
		}
		return strings.TrimRight(s, "\r\n")
	}
	head := read()
	w := strings.Fields(head)
	if len(w) != 4 || w[0] != "OK" || w[1] != "MAP" {
		t.Fatalf("MAP from %s: %q", addr, head)
	}
	epoch, _ := strconv.ParseUint(w[2], 10, 64)
	n, _ := strconv.Atoi(w[3])
	lines := make([]string, n)
	for i := range lines {
		lines[i] = read()
	}
	return epoch, lines
}

// waitMap waits until addr's map is of epoch e at least and has every
// line of wants among its lines.
func waitMap(t *testing.T, addr string, e uint64, wants ...string) {
	t.Helper()
	eventually(t, 15*time.Second, fmt.Sprintf("%s: a map of epoch %d with %q", addr, e, wants), func() bool {
		epoch, lines := mapOf(t, addr)
		if epoch < e {
			return false
		}
		text := strings.Join(lines, "\n") + "\n"
		for _, w := range wants {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	})
}

// partitionCmd sends a PARTITION request to addr and returns its epoch
// (a MOVE's answer says to=<partition>, and how many locks went along
// after it: locks=<n>).
func partitionCmd(t *testing.T, addr, cmd, to string) uint64 {
	t.Helper()
	r := raw(t, addr, cmd)[0]
	want := "OK PARTITION epoch="
	if !strings.HasPrefix(r, want) || (to != "" && !strings.Contains(r+" ", " to="+to+" ")) {
		t.Fatalf("%s: %q", cmd, r)
	}
	e, err := strconv.ParseUint(strings.Fields(strings.TrimPrefix(r, want))[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", cmd, r)
	}
	return e
}

func startPartitioned(t *testing.T) *partitioned {
	t.Helper()
	redis := startRedis(t)
	bin := dlockdBin(t)
	var p partitioned
	for i := range p.d {
		port := freePort(t)
		conf := filepath.Join(t.TempDir(), "dlockd.conf")
		text := fmt.Sprintf("[persistence]\npersist = redis\nredis = redis://127.0.0.1:%d/0\nredis_prefix = t:\n[partition]\nid = p%d\n",
			redis.port, i)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		p.d[i] = start(t, fmt.Sprintf("dlockd-p%d", i), bin, port, "-c", conf, "--port", fmt.Sprint(port),
			"-l", "info", "--state-dir", t.TempDir())
	}
	for _, d := range p.d {
		d.waitListening(20 * time.Second)
	}
	// a client of the first daemon before any map: MAP says 0
	p.early = dial(t, p.d[0].addr)
	partitionCmd(t, p.d[0].addr, "PARTITION INIT", "")
	var parts []string
	for i, d := range p.d {
		parts = append(parts, fmt.Sprintf("part p%d addrs=%s ", i, d.addr))
	}
	waitMap(t, p.d[0].addr, 1, parts...)
	partitionCmd(t, p.d[0].addr, "PARTITION MOVE 5461-10922 p1", "p1")
	p.epoch = partitionCmd(t, p.d[0].addr, "PARTITION MOVE 10923-16383 p2", "p2")
	for _, d := range p.d {
		waitMap(t, d.addr, p.epoch, "slots p0 0-5460\n", "slots p1 5461-10922\n", "slots p2 10923-16383\n")
	}
	return &p
}

// statusAt is the raw STATUS of name at addr.
func statusAt(t *testing.T, addr, name string) string {
	t.Helper()
	return raw(t, addr, "STATUS "+name)[0]
}

func TestPartitioned(t *testing.T) {
	p := startPartitioned(t)
	ctx := ctxT(t, 120*time.Second)
	if e := p.early.MapEpoch(); e != 0 {
		t.Fatalf("a client dialed before the map routes by epoch %d", e)
	}
	c := dial(t, p.d[0].addr) // the first daemon only
	if e := c.MapEpoch(); e < p.epoch {
		t.Fatalf("map epoch %d, want %d or more", e, p.epoch)
	}
	// bar: slot 5061, p0; qux: 9995, p1; foo: 12182, p2
	names := []string{"bar", "qux", "foo"}

	t.Run("routing", func(t *testing.T) {
		other := dial(t, p.d[1].addr) // another owner, from another partition's daemon
		for i, name := range names {
			l, err := c.Lock(ctx, name, TTL(10*time.Second))
			if err != nil {
				t.Fatalf("Lock %s: %v", name, err)
			}
			for k, d := range p.d {
				st := statusAt(t, d.addr, name)
				if k == i {
					if !strings.Contains(st, " state=held ") || !strings.Contains(st, fmt.Sprintf(" token=%d ", l.Token())) ||
						!strings.Contains(st, " owner="+c.Owner()+" ") {
						t.Fatalf("%s at p%d: %q (token %d)", name, k, st, l.Token())
					}
				} else if !strings.HasPrefix(st, fmt.Sprintf("NO MOVED p%d %s ", i, p.d[i].addr)) {
					t.Fatalf("%s at p%d: %q", name, k, st)
				}
			}
			if l.c == c || l.c.addrs[0].name != p.d[i].addr {
				t.Fatalf("%s: the lease is not its partition's leg's", name)
			}
			if err := l.Refresh(ctx, 20*time.Second); err != nil {
				t.Fatalf("Refresh %s: %v", name, err)
			}
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check %s: %v", name, err)
			}
			if err := c.Check(ctx, name, l.Token()); err != nil {
				t.Fatalf("Client.Check %s: %v", name, err)
			}
			st, err := c.Status(ctx, name)
			if err != nil || !st.Held || st.Token != l.Token() || st.TTL <= 10*time.Second {
				t.Fatalf("Status %s: %+v %v", name, st, err)
			}
			h, err := other.Holders(ctx, name)
			if err != nil || len(h.Holders) != 1 || h.Holders[0].Token != l.Token() {
				t.Fatalf("Holders %s: %+v %v", name, h, err)
			}
			if _, err := other.TryLock(ctx, name); !errors.Is(err, ErrBusy) {
				t.Fatalf("TryLock of a held %s: %v", name, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock %s: %v", name, err)
			}
			if st := statusAt(t, p.d[i].addr, name); !strings.Contains(st, " state=free") {
				t.Fatalf("%s after Unlock: %q", name, st)
			}
			l2, err := other.TryLock(ctx, name)
			if err != nil {
				t.Fatalf("TryLock %s after Unlock: %v", name, err)
			}
			if l2.Token() <= l.Token() {
				t.Fatalf("%s: token %d after %d", name, l2.Token(), l.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		// names at their partitions, a prefix at the first connection's
		wctx, cancel := context.WithCancel(ctx)
		ch, err := c.Watch(wctx, "foo", "qux", "ba*")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		w := dial(t, p.d[2].addr)
		for _, name := range names {
			l, err := w.Lock(ctx, name, TTL(10*time.Second))
			if err != nil {
				t.Fatalf("Lock %s: %v", name, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.After(10 * time.Second)
		for len(seen) < 3 {
			select {
			case ev := <-ch:
				if ev.Kind == EventGranted {
					seen[ev.Name] = true
				}
			case <-timeout:
				t.Fatalf("granted events seen: %v", seen)
			}
		}
		cancel()
		eventually(t, 10*time.Second, "the watch's channel closed", func() bool {
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						return true
					}
				default:
					return false
				}
			}
		})
	})

	t.Run("multi", func(t *testing.T) {
		ls, err := c.LockAll(ctx, []string{"{qux}a", "{qux}b"}, TTL(10*time.Second))
		if err != nil {
			t.Fatalf("LockAll under one tag: %v", err)
		}
		for _, l := range ls {
			if st := statusAt(t, p.d[1].addr, l.Name()); !strings.Contains(st, " state=held ") {
				t.Fatalf("%s at p1: %q", l.Name(), st)
			}
		}
		if err := UnlockAll(ctx, ls); err != nil {
			t.Fatal(err)
		}
		for _, names := range [][]string{{"bar", "qux"}, {"qux", "bar"}, {"{qux}a", "foo", "bar"}} {
			_, err := c.LockAll(ctx, names, TTL(10*time.Second))
			var e *Error
			if !errors.As(err, &e) || e.Code != "BAD_ARG" || !strings.Contains(e.Text, "several partitions") {
				t.Fatalf("LockAll across partitions %q: %v", names, err)
			}
			if _, err := c.TryLockAll(ctx, names); !errors.As(err, &e) || e.Code != "BAD_ARG" {
				t.Fatalf("TryLockAll across partitions %q: %v", names, err)
			}
		}
	})

	t.Run("moved", func(t *testing.T) {
		// c has a leg to p2 (foo's) and a map; the slot of foo goes to p1
		hold, err := c.Lock(ctx, "bar", TTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := c.MapEpoch()
		e := partitionCmd(t, p.d[2].addr, "PARTITION MOVE 12182 p1", "p1")
		waitMap(t, p.d[1].addr, e, "slots p1 5461-10922,12182\n")
		waitMap(t, p.d[2].addr, e, "slots p2 10923-12181,12183-16383\n")
		if c.MapEpoch() != before {
			t.Fatalf("the map was read again without a MOVED")
		}
		l, err := c.Lock(ctx, "foo", TTL(10*time.Second))
		if err != nil {
			t.Fatalf("Lock foo after its move: %v", err)
		}
		if st := statusAt(t, p.d[1].addr, "foo"); !strings.Contains(st, " state=held ") ||
			!strings.Contains(st, fmt.Sprintf(" token=%d ", l.Token())) {
			t.Fatalf("foo at p1: %q", st)
		}
		if got := c.MapEpoch(); got < e {
			t.Fatalf("map epoch %d after the MOVED, want %d", got, e)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// the client dialed before the map was made learns it from a
		// MOVED (its daemon had said MAP 0)
		l, err = p.early.Lock(ctx, "foo", TTL(10*time.Second))
		if err != nil {
			t.Fatalf("Lock foo by the early client: %v", err)
		}
		if st := statusAt(t, p.d[1].addr, "foo"); !strings.Contains(st, fmt.Sprintf(" token=%d ", l.Token())) {
			t.Fatalf("foo at p1: %q", st)
		}
		if p.early.MapEpoch() < e {
			t.Fatalf("the early client routes by epoch %d", p.early.MapEpoch())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !hold.Valid() {
			t.Fatalf("bar lost over the map's change: %v", hold.Err())
		}
		if err := hold.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("close", func(t *testing.T) {
		before := runtime.NumGoroutine()
		x, err := Dial(ctx, p.d[2].addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.Watch(ctx, "foo", "bar", "*"); err != nil {
			t.Fatal(err)
		}
		var ls []*Lease
		for _, name := range []string{"bar", "qux", "somekey"} { // p0, p1, p2 (11058)
			l, err := x.Lock(ctx, name, TTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		rt := x.rt.Load()
		rt.mu.Lock()
		nlegs := len(rt.legs)
		rt.mu.Unlock()
		if nlegs != 3 {
			t.Fatalf("%d legs", nlegs)
		}
		x.Close()
		for _, l := range ls {
			select {
			case <-l.Done():
			default:
				t.Fatalf("%s: Done not closed by Close", l.Name())
			}
			if _, err := l.c.Status(ctx, "bar"); !errors.Is(err, ErrClosed) {
				t.Fatalf("a leg after Close: %v", err)
			}
		}
		if _, err := x.Lock(ctx, "bar"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Lock after Close: %v", err)
		}
		eventually(t, 10*time.Second, "goroutines back to the count before", func() bool {
			return runtime.NumGoroutine() <= before
		})
	})
}

// A daemon without partitions: MAP says 0, and the client is what it
// always was (the rest of the suite says how).
func TestUnpartitionedMapZero(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 30*time.Second)
	if e, lines := mapOf(t, d.addr); e != 0 || len(lines) != 0 {
		t.Fatalf("MAP of a daemon without partitions: %d %q", e, lines)
	}
	c := dial(t, d.addr)
	if c.rt.Load() != nil || c.MapEpoch() != 0 {
		t.Fatal("a router over a daemon without partitions")
	}
	l, err := c.Lock(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	if l.c != c {
		t.Fatal("the lease is not the client's")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// partFake is a server that answers HELLO, DESCRIBE and AUTH as a dlockd
// would, MAP with what mapLines says, and any other request with what
// answer says (its words, the id= tag taken off); it counts the
// requests answer was asked for.
type partFake struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	seen  []string
	conns []net.Conn
}

// stop closes the listener and every connection.
func (f *partFake) stop() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func startPartFake(t *testing.T, mapLines func() []string, answer func(w []string) string) *partFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &partFake{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(f.stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					w := strings.Fields(s)
					if len(w) == 0 {
						continue
					}
					tag := ""
					if n := len(w); strings.HasPrefix(w[n-1], "id=") {
						tag, w = " "+w[n-1], w[:n-1]
					}
					var out []string
					switch w[0] {
					case "HELLO":
						out = []string{"OK HELLO version=0.4.0 owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=-" + tag}
					case "DESCRIBE", "AUTH":
						out = []string{"OK " + w[0] + tag}
					case "MAP":
						out = mapLines()
						out[0] += tag
					default:
						f.mu.Lock()
						f.seen = append(f.seen, strings.Join(w, " "))
						f.mu.Unlock()
						out = []string{answer(w) + tag}
					}
					if _, err := c.Write([]byte(strings.Join(out, "\r\n") + "\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return f
}

func (f *partFake) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// Two daemons that send each other's clients to each other (each MOVED
// of the client's own epoch: a stale daemon, or a race): the client
// follows 3 redirects, then fails with ErrMoved.
func TestMovedRedirectsAreBounded(t *testing.T) {
	var a, b *partFake
	mapOf := func() []string {
		return []string{"OK MAP 5 4", "part pa addrs=" + a.addr + " floor=0", "slots pa 0-16383",
			"part pb addrs=" + b.addr + " floor=0", "slots pb -"}
	}
	a = startPartFake(t, mapOf, func(w []string) string { return "NO MOVED pb " + b.addr + " 5" })
	b = startPartFake(t, mapOf, func(w []string) string { return "NO MOVED pa " + a.addr + " 5" })
	c := dial(t, a.addr, Describe(false))
	if c.MapEpoch() != 5 {
		t.Fatalf("map epoch %d", c.MapEpoch())
	}
	ctx := ctxT(t, 10*time.Second)
	_, err := c.Lock(ctx, "x")
	var e *Error
	if !errors.Is(err, ErrMoved) || !errors.As(err, &e) || e.Code != "MOVED" || e.MapEpoch != 5 || e.Partition == "" {
		t.Fatalf("Lock: %v", err)
	}
	// the first try and 3 redirects: pa (the map's), pb, pa, pb
	if na, nb := len(a.requests()), len(b.requests()); na != 2 || nb != 2 {
		t.Fatalf("%d requests to pa, %d to pb", na, nb)
	}
}

// A MOVED of a newer epoch than the client's map: the map is read again
// (from the daemon that said it) and the call goes where the new map
// says; one as old goes where it says.
func TestMovedNewerEpochRereadsTheMap(t *testing.T) {
	var a, b *partFake
	var mu sync.Mutex
	epoch := 5
	mapOf := func() []string {
		mu.Lock()
		defer mu.Unlock()
		if epoch == 5 {
			return []string{"OK MAP 5 4", "part pa addrs=" + a.addr + " floor=0", "slots pa 0-16383",
				"part pb addrs=- floor=0", "slots pb -"}
		}
		return []string{"OK MAP 6 4", "part pa addrs=" + a.addr + " floor=0", "slots pa 0-99",
			"part pb addrs=" + b.addr + " floor=0", "slots pb 100-16383"}
	}
	a = startPartFake(t, mapOf, func(w []string) string {
		if slotOf(w[1]) < 100 {
			return "OK STATUS " + w[1] + " state=free"
		}
		mu.Lock()
		epoch = 6
		mu.Unlock()
		return "NO MOVED pb " + b.addr + " 6"
	})
	b = startPartFake(t, mapOf, func(w []string) string { return "OK STATUS " + w[1] + " state=free" })
	c := dial(t, a.addr, Describe(false))
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.Status(ctx, "foo"); err != nil { // slot 12182
		t.Fatal(err)
	}
	if c.MapEpoch() != 6 {
		t.Fatalf("map epoch %d after a MOVED of epoch 6", c.MapEpoch())
	}
	if _, err := c.Status(ctx, "qux"); err != nil { // 9995: pb, by the new map
		t.Fatal(err)
	}
	if ra, rb := a.requests(), b.requests(); len(ra) != 1 || len(rb) != 2 {
		t.Fatalf("requests to pa %q, to pb %q", ra, rb)
	}
}

// A server that does not know MAP (before partitions): the client is
// unpartitioned.
func TestMapUnknownIsUnpartitioned(t *testing.T) {
	f := startPartFake(t, func() []string { return []string{"ERR UNKNOWN_COMMAND MAP"} },
		func(w []string) string { return "OK STATUS " + w[1] + " state=free" })
	c := dial(t, f.addr, Describe(false))
	if c.rt.Load() != nil {
		t.Fatal("a router")
	}
	if _, err := c.Status(ctxT(t, 10*time.Second), "foo"); err != nil {
		t.Fatal(err)
	}
}

// A newer map that gives a partition other addresses: its client keeps
// its connection, and goes to the new addresses when it reconnects.
func TestNewAddressesOfAPartition(t *testing.T) {
	var a, b1, b2 *partFake
	var mu sync.Mutex
	epoch := 5
	mapOf := func() []string {
		mu.Lock()
		defer mu.Unlock()
		if epoch == 5 {
			return []string{"OK MAP 5 4", "part pa addrs=" + a.addr + " floor=0", "slots pa 0-12181,12183-16383",
				"part pb addrs=" + b1.addr + " floor=0", "slots pb 12182"}
		}
		return []string{"OK MAP 6 4", "part pa addrs=" + a.addr + " floor=0", "slots pa 0-9994,9996-12181,12183-16383",
			"part pb addrs=" + b2.addr + " floor=0", "slots pb 9995,12182"}
	}
	free := func(w []string) string { return "OK STATUS " + w[1] + " state=free" }
	a = startPartFake(t, mapOf, func(w []string) string {
		if w[1] != "qux" {
			return free(w)
		}
		mu.Lock()
		epoch = 6
		mu.Unlock()
		return "NO MOVED pb " + b2.addr + " 6"
	})
	b1 = startPartFake(t, mapOf, free)
	b2 = startPartFake(t, mapOf, free)
	c := dial(t, a.addr, Describe(false))
	ctx := ctxT(t, 20*time.Second)
	if _, err := c.Status(ctx, "foo"); err != nil { // 12182: pb, at b1
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, "qux"); err != nil { // 9995: MOVED, then pb, still at b1
		t.Fatal(err)
	}
	if c.MapEpoch() != 6 || len(b1.requests()) != 2 || len(b2.requests()) != 0 {
		t.Fatalf("epoch %d, requests to b1 %q, to b2 %q", c.MapEpoch(), b1.requests(), b2.requests())
	}
	b1.stop()
	if _, err := c.Status(ctx, "foo"); err != nil {
		t.Fatal(err)
	}
	if got := b2.requests(); len(got) != 1 || got[0] != "STATUS foo" {
		t.Fatalf("requests to b2 %q", got)
	}
}

// ---- a PARTITION MOVE carries the slots' locks ----------------------------------

// p0Names is n names of partition p0's slots (0-5460 in startPartitioned's
// map), each of a slot of its own.
func p0Names(prefix string, n int) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if s := slotOf(name); s <= 5460 && !seen[s] {
			seen[s] = true
			out = append(out, name)
		}
	}
	return out
}

// moveName gives the slot of name from partition p<from> to p<to>
// (PARTITION MOVE at p<from>'s daemon, as an admin: again while p<to>
// has not imported the locks of an earlier move), and waits until every
// daemon's map says so and p<to> serves the name.
func (p *partitioned) moveName(t *testing.T, name string, from, to int) {
	t.Helper()
	cmd := fmt.Sprintf("PARTITION MOVE %d p%d", slotOf(name), to)
	eventually(t, 30*time.Second, "p"+fmt.Sprint(to)+" imported an earlier move", func() bool {
		r := raw(t, p.d[from].addr, cmd)[0]
		if strings.HasPrefix(r, "ERR LIMIT ") && strings.Contains(r, "not imported") {
			return false
		}
		if !strings.HasPrefix(r, "OK PARTITION epoch=") || !strings.Contains(r+" ", " to=p"+fmt.Sprint(to)+" ") {
			t.Fatalf("%s: %q", cmd, r)
		}
		e, _ := strconv.ParseUint(strings.Fields(strings.TrimPrefix(r, "OK PARTITION epoch="))[0], 10, 64)
		for _, d := range p.d {
			waitMap(t, d.addr, e)
		}
		return true
	})
	eventually(t, 30*time.Second, "p"+fmt.Sprint(to)+" serves "+name, func() bool {
		return strings.HasPrefix(statusAt(t, p.d[to].addr, name), "OK STATUS ")
	})
}

// heldAt: the daemon at addr has name held by token.
func heldAt(t *testing.T, addr, name string, token uint64) bool {
	t.Helper()
	st := statusAt(t, addr, name)
	return strings.Contains(st, " state=held ") && strings.Contains(st, fmt.Sprintf(" token=%d ", token))
}

// A move of a slot whose locks are held or waited for: the leases follow
// it with their tokens, the waiters with their places (the client
// re-homes a lease on the partition a MOVED names).
func TestPartitionMoveCarriesLocks(t *testing.T) {
	p := startPartitioned(t)
	ctx := ctxT(t, 180*time.Second)
	c := dial(t, p.d[0].addr)
	other := dial(t, p.d[0].addr) // another owner
	names := p0Names("mv", 5)

	t.Run("lease survives a move", func(t *testing.T) {
		name := names[0]
		ttl := 4 * time.Second
		l, err := c.Lock(ctx, name, TTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryLock(ctx, name); !errors.Is(err, ErrBusy) {
			t.Fatalf("TryLock of a held %s: %v", name, err)
		}
		p.moveName(t, name, 0, 1)
		time.Sleep(2 * ttl) // renewed all along: at p0, then at p1
		if !l.Valid() || l.Err() != nil {
			t.Fatalf("the lease was lost over the move: %v", l.Err())
		}
		select {
		case <-l.Done():
			t.Fatalf("Done closed: %v", l.Err())
		default:
		}
		if !heldAt(t, p.d[1].addr, name, l.Token()) {
			t.Fatalf("%s at p1: %q (token %d)", name, statusAt(t, p.d[1].addr, name), l.Token())
		}
		if x, _ := l.home(ctx); x.addrs[0].name != p.d[1].addr {
			t.Fatalf("the lease belongs to the client of %s, not p1's", x.addrs[0].name)
		}
		if _, err := other.TryLock(ctx, name); !errors.Is(err, ErrBusy) {
			t.Fatalf("TryLock of %s after its move: %v", name, err)
		}
		if err := l.Refresh(ctx, 0); err != nil {
			t.Fatalf("Refresh after the move: %v", err)
		}
		if err := l.Check(ctx); err != nil {
			t.Fatalf("Check after the move: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after the move: %v", err)
		}
		l2, err := other.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("TryLock after the Unlock: %v", err)
		}
		if l2.Token() <= l.Token() {
			t.Fatalf("token %d after %d", l2.Token(), l.Token())
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a waiter follows its name", func(t *testing.T) {
		name := names[1]
		la, err := c.Lock(ctx, name, TTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *Lease
			err error
		}
		ch := make(chan result, 1)
		go func() {
			l, err := other.Lock(ctx, name, TTL(10*time.Second), Wait(90*time.Second))
			ch <- result{l, err}
		}()
		eventually(t, 10*time.Second, "a waiter at p0", func() bool {
			return strings.Contains(statusAt(t, p.d[0].addr, name), " waiters=1 ")
		})
		p.moveName(t, name, 0, 1)
		select {
		case r := <-ch:
			t.Fatalf("the waiter ended while the lock was held: %v", r.err)
		case <-time.After(time.Second):
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after the move: %v", err)
		}
		var r result
		select {
		case r = <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("the waiter was not granted after the Unlock")
		}
		if r.err != nil {
			t.Fatalf("the waiter: %v", r.err)
		}
		if r.l.Token() <= la.Token() {
			t.Fatalf("the waiter's token %d after %d", r.l.Token(), la.Token())
		}
		if !heldAt(t, p.d[1].addr, name, r.l.Token()) {
			t.Fatalf("%s at p1: %q (token %d)", name, statusAt(t, p.d[1].addr, name), r.l.Token())
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a caller's request follows", func(t *testing.T) {
		// leases not renewed: the caller's Refresh, or Unlock, is the
		// first request about them to meet the MOVED
		lr, err := c.Lock(ctx, names[2], TTL(30*time.Second), NoRenew())
		if err != nil {
			t.Fatal(err)
		}
		lu, err := c.Lock(ctx, names[3], TTL(30*time.Second), NoRenew())
		if err != nil {
			t.Fatal(err)
		}
		p.moveName(t, names[2], 0, 1)
		p.moveName(t, names[3], 0, 1)
		if err := lr.Refresh(ctx, 0); err != nil {
			t.Fatalf("Refresh of a lease moved: %v", err)
		}
		if err := lr.Check(ctx); err != nil {
			t.Fatalf("Check of a lease moved: %v", err)
		}
		if !heldAt(t, p.d[1].addr, names[2], lr.Token()) {
			t.Fatalf("%s at p1: %q", names[2], statusAt(t, p.d[1].addr, names[2]))
		}
		if _, err := other.TryLock(ctx, names[3]); !errors.Is(err, ErrBusy) {
			t.Fatalf("TryLock of a held %s: %v", names[3], err)
		}
		if err := lu.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of a lease moved: %v", err)
		}
		for _, l := range []*Lease{lr, lu} {
			if l != lu {
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			l2, err := other.TryLock(ctx, l.Name())
			if err != nil {
				t.Fatalf("TryLock of %s after its Unlock: %v", l.Name(), err)
			}
			if l2.Token() <= l.Token() {
				t.Fatalf("%s: token %d after %d", l.Name(), l2.Token(), l.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a multi-lock waiter follows its names", func(t *testing.T) {
		// ended at p0 by * FAILED ... MOVED (no partition said): the map
		// is read again and the multi-lock sent to p1
		tag := names[4]
		both := []string{"{" + tag + "}a", "{" + tag + "}b"}
		held, err := c.Lock(ctx, both[1], TTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  []*Lease
			err error
		}
		ch := make(chan result, 1)
		go func() {
			ls, err := other.LockAll(ctx, both, TTL(10*time.Second), Wait(90*time.Second))
			ch <- result{ls, err}
		}()
		eventually(t, 10*time.Second, "a waiter at p0", func() bool {
			return strings.Contains(statusAt(t, p.d[0].addr, both[1]), " waiters=1 ")
		})
		p.moveName(t, tag, 0, 1)
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after the move: %v", err)
		}
		var r result
		select {
		case r = <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("the multi-lock was not granted after the Unlock")
		}
		if r.err != nil {
			t.Fatalf("the multi-lock: %v", r.err)
		}
		for _, l := range r.ls {
			if l.Token() <= held.Token() || !heldAt(t, p.d[1].addr, l.Name(), l.Token()) {
				t.Fatalf("%s: token %d (after %d) at p1: %q", l.Name(), l.Token(), held.Token(), statusAt(t, p.d[1].addr, l.Name()))
			}
		}
		if err := UnlockAll(ctx, r.ls); err != nil {
			t.Fatal(err)
		}
	})
}
