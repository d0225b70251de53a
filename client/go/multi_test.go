// multi_test.go: several locks at once (LockAll, TryLockAll, UnlockAll):
// what the client says and makes of the replies and events, played by a
// scripted fake server, then against the real daemon.

package dlockd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is a fake server whose requests (their words, the id= tag taken
// off) are handed to a function that answers with send, now or later
// (events); HELLO, DESCRIBE, AUTH and MAP are answered as a dlockd would.
type script struct {
	addr  string
	mu    sync.Mutex
	seen  []string // the request lines, the id= tag taken off
	conns int
}

func startScript(t *testing.T, answer func(words []string, tag string, send func(lines ...string))) *script {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &script{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				var wmu sync.Mutex
				send := func(lines ...string) {
					wmu.Lock()
					defer wmu.Unlock()
					for _, l := range lines {
						fmt.Fprintf(c, "%s\r\n", l)
					}
				}
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					words := strings.Fields(l)
					tag := ""
					if n := len(words); n > 0 && strings.HasPrefix(words[n-1], "id=") {
						tag, words = words[n-1][3:], words[:n-1]
					}
					if len(words) == 0 {
						continue
					}
					switch words[0] {
					case "HELLO":
						send("OK HELLO version=0.4.0 owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=- id=" + tag)
						continue
					case "DESCRIBE", "AUTH":
						send("OK " + words[0] + " id=" + tag)
						continue
					case "MAP":
						send("OK MAP 0 0 id=" + tag) // not partitioned
						continue
					}
					s.mu.Lock()
					s.seen = append(s.seen, strings.Join(words, " "))
					s.mu.Unlock()
					answer(words, tag, send)
				}
			}()
		}
	}()
	return s
}

// lines is what the client sent whose verb is one of verbs.
func (s *script) lines(verbs ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.seen {
		for _, v := range verbs {
			if strings.HasPrefix(l, v+" ") {
				out = append(out, l)
			}
		}
	}
	return out
}

func kvOf(line, key string) string {
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, key+"=") {
			return w[len(key)+1:]
		}
	}
	return ""
}

// lockedLines is a multi-lock's grant of names (in byte order) with
// tokens from token on: the header (OK LOCKED or * LOCKED) and its lines.
func lockedLines(head, tag string, ttl int, token uint64, names ...string) []string {
	out := []string{fmt.Sprintf("%s %s %d id=%s", head, names[0], len(names), tag)}
	for i, n := range names {
		out = append(out, fmt.Sprintf("granted %s %d %d holds=1", n, token+uint64(i), ttl))
	}
	return out
}

// answerRest answers what a lease does afterwards (REFRESH, UNLOCK,
// CANCEL), for the scripts.
func answerRest(words []string, tag string, send func(lines ...string)) bool {
	switch words[0] {
	case "REFRESH":
		send(fmt.Sprintf("OK REFRESHED %s %s id=%s", words[1], strings.TrimPrefix(words[3], "ttl="), tag))
	case "UNLOCK":
		send(fmt.Sprintf("OK RELEASED %s id=%s", words[1], tag))
	case "CANCEL":
		send(fmt.Sprintf("OK CANCELLED %s id=%s", words[1], tag))
	case "PING":
		send("OK PONG id=" + tag)
	default:
		return false
	}
	return true
}

func scriptDial(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(ctxT(t, 10*time.Second), addr, ServerTimeout(2*time.Second), Describe(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The request names the locks in byte order with ttl=, wait= and req=;
// the leases come back in the order asked, each an ordinary lease;
// UnlockAll sends an UNLOCK for each.
func TestMultiLockOnTheWire(t *testing.T) {
	s := startScript(t, func(w []string, tag string, send func(...string)) {
		if answerRest(w, tag, send) {
			return
		}
		switch w[0] {
		case "LOCK":
			send(lockedLines("OK LOCKED", tag, 5000, 10, "A", "a", "ab", "b")...)
		case "TRYLOCK":
			send("NO BUSY b 2900 owner=alice held_ms=100 id=" + tag)
		default:
			send("ERR BAD_FORMAT id=" + tag)
		}
	})
	c := scriptDial(t, s.addr)
	ctx := ctxT(t, 10*time.Second)
	ls, err := c.LockAll(ctx, []string{"b", "ab", "a", "A"}, TTL(5*time.Second), Wait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := s.lines("LOCK")
	if len(got) != 1 || !strings.HasPrefix(got[0], "LOCK A a ab b ttl=5000 wait=") || kvOf(got[0], "req") == "" {
		t.Fatalf("sent %q", got)
	}
	want := map[string]uint64{"A": 10, "a": 11, "ab": 12, "b": 13}
	for i, n := range []string{"b", "ab", "a", "A"} {
		l := ls[i]
		if l.Name() != n || l.Token() != want[n] || l.Mode() != "exclusive" || !l.Valid() {
			t.Fatalf("lease %d: %s token %d mode %s valid %v", i, l.Name(), l.Token(), l.Mode(), l.Valid())
		}
		if r := l.Remaining(); r <= 4*time.Second || r > 5*time.Second {
			t.Fatalf("%s: remaining %v", n, r)
		}
	}
	if err := UnlockAll(ctx, ls); err != nil {
		t.Fatal(err)
	}
	if u := s.lines("UNLOCK"); len(u) != 4 {
		t.Fatalf("UNLOCKs sent: %q", u)
	}
	for _, l := range ls {
		if l.Valid() {
			t.Fatalf("%s valid after UnlockAll", l.Name())
		}
	}
	// released: the names may be asked again; a try is TRYLOCK, no wait=
	var e *Error
	if _, err := c.TryLockAll(ctx, []string{"b", "a"}); !errors.Is(err, ErrBusy) || !errors.As(err, &e) || e.Holder == nil || e.Holder.Owner != "alice" {
		t.Fatalf("TryLockAll answered NO BUSY: %v", err)
	}
	if got := s.lines("TRYLOCK"); len(got) != 1 || !strings.HasPrefix(got[0], "TRYLOCK a b ttl=") || kvOf(got[0], "wait") != "" {
		t.Fatalf("sent %q", got)
	}
}

// A multi-lock that must wait: OK QUEUED, then * LOCKED with its lines;
// the client confirms by sending the same request (the same req= id) and
// counts the leases from that write.
func TestMultiLockWaitsThenIsConfirmed(t *testing.T) {
	var n int
	s := startScript(t, func(w []string, tag string, send func(...string)) {
		if answerRest(w, tag, send) {
			return
		}
		n++
		if n == 1 {
			send("OK QUEUED m 1 at=n id=" + tag)
			go func() {
				time.Sleep(300 * time.Millisecond)
				send(lockedLines("* LOCKED", tag, 1000, 20, "m", "n")...)
			}()
			return
		}
		send(lockedLines("OK LOCKED", tag, 1000, 20, "m", "n")...)
	})
	c := scriptDial(t, s.addr)
	ctx := ctxT(t, 10*time.Second)
	ls, err := c.LockAll(ctx, []string{"n", "m"}, TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := s.lines("LOCK")
	if len(got) != 2 || got[0] != got[1] || kvOf(got[0], "wait") != "inf" || kvOf(got[0], "req") == "" {
		t.Fatalf("sent %q: the same request twice", got)
	}
	s.mu.Lock()
	conns := s.conns
	s.mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections: the grant was not taken on the first", conns)
	}
	if ls[0].Name() != "n" || ls[0].Token() != 21 || ls[1].Token() != 20 {
		t.Fatalf("leases %s %d, %s %d", ls[0].Name(), ls[0].Token(), ls[1].Name(), ls[1].Token())
	}
	// renewed like any lease
	time.Sleep(1500 * time.Millisecond)
	for _, l := range ls {
		if !l.Valid() {
			t.Fatalf("%s not renewed: %v", l.Name(), l.Err())
		}
	}
	if r := s.lines("REFRESH"); len(r) < 2 {
		t.Fatalf("renewals: %q", r)
	}
	_ = UnlockAll(ctx, ls)
}

// The ends of a multi-lock without its locks map onto the client's errors.
func TestMultiLockFailuresAreTheClientsErrors(t *testing.T) {
	for _, tc := range []struct {
		reply  []string // %s: the tag
		event  string   // after OK QUEUED, when reply is nil
		kind   error
		code   string
		owners int
	}{
		{reply: []string{"NO BUSY a 2900 owner=alice held_ms=100 id=%s"}, kind: ErrBusy, code: "BUSY"},
		{reply: []string{"NO DEADLOCK b 2 alice c id=%s"}, kind: ErrDeadlock, code: "DEADLOCK", owners: 2},
		{reply: []string{"NO ALREADY_HELD b 77 id=%s"}, kind: ErrHeldByOwner, code: "ALREADY_HELD"},
		{reply: []string{"ERR LIMIT one multi-lock at a time per connection id=%s"}, kind: ErrLimit, code: "LIMIT"},
		{reply: []string{"ERR UNAVAILABLE persistence went down before the grant was recorded, try again id=%s"}, kind: ErrUnavailable, code: "UNAVAILABLE"},
		{event: "* TIMEOUT a id=%s", kind: ErrTimeout},
		{event: "* FAILED a DEADLOCK c 3 bob b id=%s", kind: ErrDeadlock, code: "DEADLOCK", owners: 3},
		{event: "* FAILED a UNAVAILABLE persistence went down id=%s", kind: ErrUnavailable, code: "UNAVAILABLE"},
		{event: "* FAILED a EXPIRED b id=%s", kind: ErrServer, code: "EXPIRED"},
	} {
		tc := tc
		s := startScript(t, func(w []string, tag string, send func(...string)) {
			if answerRest(w, tag, send) {
				return
			}
			if tc.reply != nil {
				send(fmt.Sprintf(tc.reply[0], tag))
				return
			}
			send("OK QUEUED a 1 at=b id=" + tag)
			go func() {
				time.Sleep(100 * time.Millisecond)
				send(fmt.Sprintf(tc.event, tag))
			}()
		})
		c := scriptDial(t, s.addr)
		_, err := c.LockAll(ctxT(t, 10*time.Second), []string{"a", "b", "c"}, Wait(2*time.Second))
		var e *Error
		if !errors.Is(err, tc.kind) || !errors.As(err, &e) || e.Code != tc.code || e.Owners != tc.owners {
			t.Fatalf("%v%s: %v, want %v, code %s, owners %d", tc.reply, tc.event, err, tc.kind, tc.code, tc.owners)
		}
		// the client goes on: the connection was not taken for a broken server's
		if err := c.Ping(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("after %v%s: %v", tc.reply, tc.event, err)
		}
	}
}

// A LockAll given up while it waits cancels the wait by its first name;
// a grant that crosses the CANCEL is given back, every lease of it.
func TestMultiLockGivenUpIsCancelled(t *testing.T) {
	lockTag := ""
	s := startScript(t, func(w []string, tag string, send func(...string)) {
		switch w[0] {
		case "LOCK":
			lockTag = tag
			send("OK QUEUED k 2 at=l id=" + tag)
		case "CANCEL":
			// the grant crossed the cancel
			send(lockedLines("* LOCKED", lockTag, 5000, 30, "k", "l")...)
			send("NO NOT_WAITING k id=" + tag)
		default:
			answerRest(w, tag, send)
		}
	})
	c := scriptDial(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.LockAll(ctx, []string{"l", "k"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll given up: %v", err)
	}
	eventually(t, 5*time.Second, "CANCEL k, then both crossed grants given back", func() bool {
		return len(s.lines("CANCEL")) == 1 && len(s.lines("UNLOCK")) == 2
	})
	if got := s.lines("CANCEL"); got[0] != "CANCEL k" {
		t.Fatalf("sent %q", got)
	}
	if err := c.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("the connection: %v", err)
	}
}

// Refused before anything is sent: bad names, options a multi-lock does
// not take, a name the client holds.
func TestMultiLockArguments(t *testing.T) {
	s := startScript(t, func(w []string, tag string, send func(...string)) {
		if answerRest(w, tag, send) {
			return
		}
		if w[0] == "LOCK" || w[0] == "TRYLOCK" {
			send(fmt.Sprintf("OK GRANTED %s 5 30000 holds=1 id=%s", w[1], tag))
			return
		}
		send("ERR BAD_FORMAT id=" + tag)
	})
	c := scriptDial(t, s.addr)
	ctx := ctxT(t, 10*time.Second)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	long := make([]string, 8)
	for i := range long {
		long[i] = fmt.Sprintf("%d%s", i, strings.Repeat("x", 125))
	}
	for _, tc := range []struct {
		names []string
		opts  []LockOption
	}{
		{names: nil},
		{names: []string{"a", "a"}},
		{names: []string{"a", "b c"}},
		{names: []string{"a", "b=c"}},
		{names: many},
		{names: long},
		{names: []string{"a", "b"}, opts: []LockOption{Shared()}},
		{names: []string{"a", "b"}, opts: []LockOption{Limit(3)}},
		{names: []string{"a", "b"}, opts: []LockOption{NotifyWaiters()}},
		{names: []string{"a", "b"}, opts: []LockOption{Value("v")}},
		{names: []string{"a", "b"}, opts: []LockOption{TTL(0)}},
	} {
		if _, err := c.LockAll(ctx, tc.names, tc.opts...); !errors.Is(err, ErrInvalid) {
			t.Fatalf("LockAll(%d names %.20q): %v, want ErrInvalid", len(tc.names), tc.names, err)
		}
	}
	if got := s.lines("LOCK", "TRYLOCK"); len(got) != 0 {
		t.Fatalf("sent %q", got)
	}
	// one name is the ordinary LOCK
	one, err := c.LockAll(ctx, []string{"solo"})
	if err != nil || len(one) != 1 || one[0].Name() != "solo" {
		t.Fatalf("LockAll of one name: %v %v", one, err)
	}
	// a name the client holds: new leases only, nothing sent
	if _, err := c.LockAll(ctx, []string{"solo", "other"}); !errors.Is(err, ErrHeldByOwner) {
		t.Fatalf("LockAll of a held name: %v", err)
	}
	if got := s.lines("LOCK", "TRYLOCK"); len(got) != 1 {
		t.Fatalf("sent %q", got)
	}
}

// ---- against the daemon ----------------------------------------------------------

func TestMultiLockAgainstTheDaemon(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	ls, err := a.LockAll(ctx, []string{"mz", "mx", "my"}, TTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"mz", "mx", "my"} {
		if ls[i].Name() != n {
			t.Fatalf("lease %d is %s, not %s", i, ls[i].Name(), n)
		}
		st, err := b.Status(ctx, n)
		if err != nil || !st.Held || st.Token != ls[i].Token() || st.Owner != a.Owner() {
			t.Fatalf("%s: %+v %v", n, st, err)
		}
	}
	if ls[1].Token() >= ls[2].Token() || ls[2].Token() >= ls[0].Token() {
		t.Fatalf("tokens %d %d %d not in byte order of the names", ls[1].Token(), ls[2].Token(), ls[0].Token())
	}
	// busy for another owner, all or none
	if _, err := b.TryLockAll(ctx, []string{"free1", "my"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLockAll over a held lock: %v", err)
	}
	if st, _ := b.Status(ctx, "free1"); st.Held {
		t.Fatal("free1 held after a refused multi-lock")
	}
	// renewed past their TTL
	time.Sleep(2 * time.Second)
	for _, l := range ls {
		if !l.Valid() {
			t.Fatalf("%s lost: %v", l.Name(), l.Err())
		}
	}
	// one released alone, the others together
	if err := ls[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := UnlockAll(ctx, []*Lease{ls[0], nil, ls[2]}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"mx", "my", "mz"} {
		if st, _ := b.Status(ctx, n); st.Held {
			t.Fatalf("%s still held", n)
		}
	}
}

func TestMultiLockWaitsAndIsCancelled(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	l, err := a.Lock(ctx, "w2", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// a wait that runs out gives back what it took
	if _, err := b.LockAll(ctx, []string{"w2", "w1"}, Wait(300*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait(300ms): %v", err)
	}
	if st, _ := a.Status(ctx, "w1"); st.Held {
		t.Fatal("w1 held after the multi-lock timed out")
	}
	// a wait ctx ends: cancelled, what it took given back
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = b.LockAll(cctx, []string{"w1", "w2"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx-ended wait: %v", err)
	}
	eventually(t, 10*time.Second, "w1 free and nobody waits for w2", func() bool {
		st1, err1 := a.Status(ctx, "w1")
		st2, err2 := a.Status(ctx, "w2")
		return err1 == nil && err2 == nil && !st1.Held && st2.Waiters == 0
	})
	// two LockAlls of one client: one at a time on its connection, both granted
	type out struct {
		ls  []*Lease
		err error
	}
	res := make(chan out, 2)
	for _, names := range [][]string{{"w1", "w2"}, {"w3", "w4"}} {
		names := names
		go func() {
			ls, err := b.LockAll(ctx, names, TTL(5*time.Second), Wait(20*time.Second))
			res <- out{ls, err}
		}()
	}
	eventually(t, 10*time.Second, "b waits for w2 holding w1", func() bool {
		st, err := a.Status(ctx, "w1")
		return err == nil && st.Held && st.Owner == b.Owner()
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		o := <-res
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.ls[0].Name() == "w1" && o.ls[1].Token() <= l.Token() {
			t.Fatalf("w2's token %d not above %d", o.ls[1].Token(), l.Token())
		}
		if err := UnlockAll(ctx, o.ls); err != nil {
			t.Fatal(err)
		}
	}
}

// Another client of the same owner holds one of the names: the server
// refuses (NO ALREADY_HELD), nothing is held.
func TestMultiLockOfALockTheOwnerHoldsElsewhere(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr, Owner("twin"))
	b := dial(t, d.addr, Owner("twin"), OwnerKey(a.OwnerKey()))
	l, err := a.Lock(ctx, "h1", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	_, err = b.LockAll(ctx, []string{"h0", "h1"}, Wait(time.Second))
	if !errors.Is(err, ErrHeldByOwner) || !errors.As(err, &e) || e.Code != "ALREADY_HELD" {
		t.Fatalf("LockAll of a lock its owner holds: %v", err)
	}
	if st, _ := a.Status(ctx, "h0"); st.Held {
		t.Fatal("h0 held after the refusal")
	}
	if st, _ := a.Status(ctx, "h1"); st.Count != 1 || st.Token != l.Token() {
		t.Fatalf("h1: %+v", st)
	}
	_ = l.Unlock(ctx)
}

// A LockAll whose grant a proxy discarded, then the connection cut: the
// request sent again (the same req= id) gets back the same leases, no
// others.
func TestMultiLockWhoseReplyADropLostGetsItsLeasesBack(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	p := startHoldProxy(t, d.addr)
	c := dial(t, p.addr)
	type outcome struct {
		ls  []*Lease
		err error
	}
	done := make(chan outcome, 1)
	p.setMute(true)
	go func() {
		ls, err := c.LockAll(ctx, []string{"lost-b", "lost-a"}, TTL(10*time.Second), Wait(8*time.Second))
		done <- outcome{ls, err}
	}()
	var sa, sb Status
	eventually(t, 10*time.Second, "both granted at the server", func() bool {
		sa, sb = rawStatus(t, d.addr, "lost-a"), rawStatus(t, d.addr, "lost-b")
		return sa.Held && sb.Held
	})
	p.setMute(false)
	p.cut()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the LockAll did not return")
	}
	if o.err != nil {
		t.Fatalf("LockAll whose reply was lost: %v", o.err)
	}
	if o.ls[0].Token() != sb.Token || o.ls[1].Token() != sa.Token {
		t.Fatalf("tokens %d %d, the server's %d %d", o.ls[0].Token(), o.ls[1].Token(), sb.Token, sa.Token)
	}
	if err := UnlockAll(ctx, o.ls); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"lost-a", "lost-b"} {
		if st := rawStatus(t, d.addr, n); st.Held {
			t.Fatalf("%s held after UnlockAll: %+v", n, st)
		}
	}
}
