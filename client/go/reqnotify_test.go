// reqnotify_test.go: request ids (LOCK req=: a LOCK sent again after a
// drop that lost its reply gets its grant back) and news of waiters
// (LOCK notify=waiters, * WAITING: OnContended and Lease.Waiters).

package dlockd

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawStatus is STATUS <name> asked on a connection of its own.
func rawStatus(t *testing.T, addr, name string) Status {
	t.Helper()
	r := parseReply(raw(t, addr, "STATUS "+name)[0])
	if r == nil || r.kind != "OK" || r.word != "STATUS" {
		t.Fatalf("STATUS %s: %v", name, r)
	}
	return statusOf(name, r)
}

// rawWaiter queues another owner's LOCK of name on a connection of its
// own, kept open (so that it waits) until the test ends.
func rawWaiter(t *testing.T, addr, name string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "LOCK %s ttl=10000 wait=30000\r\n", name); err != nil {
		t.Fatal(err)
	}
	s, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(s, "OK QUEUED ") {
		t.Fatalf("LOCK %s from another owner: %q %v, want OK QUEUED", name, s, err)
	}
	return c
}

// A LOCK whose reply a drop lost is sent again with the same request id,
// and the server answers it with the grant it made: the acquire gets that
// lease, held once, and one Unlock frees the lock. (Without the id the
// server took the LOCK sent again for a reentry, holds=2, which the
// client must take for another process's hold: it gave one back and
// failed with ErrHeldByOwner, and the lock stayed held for its TTL.)
func TestALockWhoseReplyADropLostGetsItsGrantBack(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	p := startHoldProxy(t, d.addr)
	c := dial(t, p.addr)
	type outcome struct {
		l   *Lease
		err error
	}
	done := make(chan outcome, 1)
	p.setMute(true)
	go func() {
		l, err := c.Lock(ctx, "lost-reply", TTL(10*time.Second), Wait(8*time.Second))
		done <- outcome{l, err}
	}()
	var st Status
	eventually(t, 10*time.Second, "lost-reply granted at the server", func() bool {
		st = rawStatus(t, d.addr, "lost-reply")
		return st.Held
	})
	p.setMute(false)
	p.cut() // the grant's reply was discarded: the client sends the LOCK again
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the Lock did not return")
	}
	if o.err != nil {
		t.Fatalf("Lock whose reply was lost: %v", o.err)
	}
	if o.l.Token() != st.Token {
		t.Fatalf("the lease's token %d, the server's %d", o.l.Token(), st.Token)
	}
	if st2 := rawStatus(t, d.addr, "lost-reply"); !st2.Held || st2.Token != st.Token || st2.Count != 1 {
		t.Fatalf("STATUS after the retry: %+v, want held by token %d, count 1", st2, st.Token)
	}
	if err := o.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := raw(t, d.addr, "TRYLOCK lost-reply ttl=1000")[0]; !strings.HasPrefix(got, "OK GRANTED ") {
		t.Fatalf("another owner's TRYLOCK after the one Unlock: %q", got)
	}
}

func TestTakesReqFromVersion0_4(t *testing.T) {
	for v, want := range map[string]bool{
		"0.4.0": true, "0.4.1": true, "0.10.0": true, "1.0.0": true, "2.1": true,
		"0.3.0": false, "0.3.9": false, "0.0.1": false, "": false, "x.4.0": false, "0": false, "0.": false,
	} {
		if got := takesReq(v); got != want {
			t.Errorf("takesReq(%q) = %v, want %v", v, got, want)
		}
	}
}

// versionFake answers HELLO with the version given, and a LOCK or
// TRYLOCK with a grant; it keeps the LOCK lines it was sent.
func versionFake(t *testing.T, version string) (string, func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var locks []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					words := strings.Fields(s)
					if len(words) == 0 {
						continue
					}
					tag := ""
					if n := len(words); strings.HasPrefix(words[n-1], "id=") {
						tag = " " + words[n-1]
					}
					var out string
					switch words[0] {
					case "HELLO":
						out = "OK HELLO version=" + version + " owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=-"
					case "LOCK", "TRYLOCK":
						mu.Lock()
						locks = append(locks, strings.TrimSpace(s))
						mu.Unlock()
						out = "OK GRANTED " + words[1] + " 7 30000 holds=1"
					case "REFRESH":
						out = "OK REFRESHED " + words[1] + " 30000"
					default:
						out = "OK " + words[0]
					}
					if _, err := c.Write([]byte(out + tag + "\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), locks...)
	}
}

// req= goes only to a server whose HELLO says 0.4.0 or later (a 0.3
// server refuses the option); notify=waiters goes when asked.
func TestRequestIdOnlyTo0_4(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	for _, v := range []string{"0.3.0", "0.4.0"} {
		addr, locks := versionFake(t, v)
		c := dial(t, addr, Describe(false))
		l1, err := c.Lock(ctx, "a", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l2, err := c.TryLock(ctx, "b", TTL(30*time.Second), NotifyWaiters())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = l1, l2
		got := locks()
		if len(got) != 2 {
			t.Fatalf("%s: LOCK lines %q", v, got)
		}
		var ids []string
		for _, s := range got {
			has := strings.Contains(s, " req=")
			if has != (v == "0.4.0") {
				t.Fatalf("server %s was sent %q", v, s)
			}
			for _, w := range strings.Fields(s) {
				if strings.HasPrefix(w, "req=") {
					if atou(w[4:]) == 0 {
						t.Fatalf("a request id of 0 or not a number: %q", s)
					}
					ids = append(ids, w)
				}
			}
		}
		if len(ids) == 2 && ids[0] == ids[1] {
			t.Fatalf("two acquires sent one request id: %q", got)
		}
		if strings.Contains(got[0], "notify=") || !strings.Contains(got[1], " notify=waiters") {
			t.Fatalf("notify=waiters on the one that asked it only: %q", got)
		}
		c.Close()
	}
}

// told records what OnContended said, by lease.
type told struct {
	mu sync.Mutex
	by map[*Lease][]int
}

func (w *told) on(l *Lease, n int) {
	w.mu.Lock()
	w.by[l] = append(w.by[l], n)
	w.mu.Unlock()
}

func (w *told) of(l *Lease) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.by[l]...)
}

func (w *told) last(l *Lease) int {
	s := w.of(l)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// A lease taken with NotifyWaiters hears of each other owner that queues
// (OnContended, and Waiters when asked); one taken without hears nothing.
func TestNotifyWaitersTellsTheHolder(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	w := &told{by: map[*Lease][]int{}}
	c := dial(t, d.addr, OnContended(w.on))
	hot, err := c.Lock(ctx, "hot", TTL(10*time.Second), NotifyWaiters())
	if err != nil {
		t.Fatal(err)
	}
	cold, err := c.Lock(ctx, "cold", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if hot.Waiters() != 0 || cold.Waiters() != 0 {
		t.Fatal("Waiters is not 0 before the server said anything")
	}
	rawWaiter(t, d.addr, "hot")
	rawWaiter(t, d.addr, "cold")
	eventually(t, 5*time.Second, "OnContended(hot, 1)", func() bool { return w.last(hot) == 1 })
	if hot.Waiters() != 1 {
		t.Fatalf("hot.Waiters() %d, want 1", hot.Waiters())
	}
	rawWaiter(t, d.addr, "hot")
	rawWaiter(t, d.addr, "cold")
	eventually(t, 5*time.Second, "OnContended(hot, 2)", func() bool { return w.last(hot) == 2 })
	if hot.Waiters() != 2 {
		t.Fatalf("hot.Waiters() %d, want 2", hot.Waiters())
	}
	if got := w.of(hot); len(got) != 2 {
		t.Fatalf("OnContended for hot said %v, want [1 2]", got)
	}
	time.Sleep(300 * time.Millisecond)
	if got := w.of(cold); len(got) != 0 || cold.Waiters() != 0 {
		t.Fatalf("a lease without NotifyWaiters was told %v (Waiters %d)", got, cold.Waiters())
	}
	if st := rawStatus(t, d.addr, "cold"); st.Waiters != 2 {
		t.Fatalf("cold has %d waiters, want 2", st.Waiters)
	}
}

// OnContended runs off the client's own goroutine: it may call the
// client, here to give the lease up to the one that waits.
func TestOnContendedMayUnlock(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	unlocked := make(chan error, 1)
	c := dial(t, d.addr, OnContended(func(l *Lease, n int) {
		err := l.Unlock(ctx)
		select {
		case unlocked <- err:
		default:
		}
	}))
	l, err := c.Lock(ctx, "yield", TTL(10*time.Second), NotifyWaiters())
	if err != nil {
		t.Fatal(err)
	}
	b := dial(t, d.addr)
	got := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, "yield", TTL(10*time.Second), Wait(10*time.Second))
		if err == nil && lb.Token() <= l.Token() {
			err = errors.New("the waiter's token is not above the holder's")
		}
		got <- err
	}()
	select {
	case err := <-unlocked:
		if err != nil {
			t.Fatalf("Unlock from OnContended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnContended not called")
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if l.Waiters() != 1 {
		t.Fatalf("Waiters() %d, want 1", l.Waiters())
	}
}

// A waiter granted while others wait behind it is told right after its
// * GRANTED, before its confirmation is answered: the count is kept and
// given to the lease once made.
func TestAWaiterGrantedIsToldOfThoseBehindIt(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	w := &told{by: map[*Lease][]int{}}
	b := dial(t, d.addr, OnContended(w.on))
	la, err := a.Lock(ctx, "line", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		l   *Lease
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		l, err := b.Lock(ctx, "line", TTL(10*time.Second), Wait(10*time.Second), NotifyWaiters())
		done <- outcome{l, err}
	}()
	eventually(t, 5*time.Second, "b waits", func() bool { return rawStatus(t, d.addr, "line").Waiters == 1 })
	rawWaiter(t, d.addr, "line")
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	eventually(t, 5*time.Second, "OnContended(b's lease, 1)", func() bool { return w.last(o.l) == 1 })
	if o.l.Waiters() != 1 {
		t.Fatalf("Waiters() %d, want 1", o.l.Waiters())
	}
}
