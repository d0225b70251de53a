// client_test.go: the client against a real memory-only dlockd: locking,
// renewal, loss, waits, status, holders, watches, shared locks and
// semaphores, options from the environment, and no goroutine leak.

package dlockd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestLockTryLockUnlock(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	l, err := a.Lock(ctx, "stock", TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == 0 || l.Name() != "stock" || l.Err() != nil {
		t.Fatalf("lease %d %q %v", l.Token(), l.Name(), l.Err())
	}
	if r := l.Remaining(); r <= 0 || r > 5*time.Second {
		t.Fatalf("remaining %v, not in (0, 5s]", r)
	}
	st, err := a.Status(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	// the client never counts on more than the server grants
	if r := l.Remaining(); r > st.TTL+2*time.Millisecond {
		t.Fatalf("local remaining %v above the server's %v", r, st.TTL)
	}
	if !st.Held || st.Token != l.Token() || st.Owner != a.Owner() || st.Mode != "exclusive" || st.Holders != 1 {
		t.Fatalf("status %+v", st)
	}
	_, err = b.TryLock(ctx, "stock")
	var e *Error
	if !errors.Is(err, ErrBusy) || !errors.As(err, &e) || e.Holder == nil || e.Holder.Owner != a.Owner() {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Status(ctx, "stock"); st.Held {
		t.Fatalf("held after Unlock: %+v", st)
	}
	l2, err := b.TryLock(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), l.Token())
	}
	if err := l.Check(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("Check of a released token: %v", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("second Unlock: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed by Unlock")
	default:
	}
}

func TestRenewalKeepsLease(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	l, err := c.Lock(ctx, "renewed", TTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // > 3 TTLs
	if l.Err() != nil {
		t.Fatalf("lost: %v", l.Err())
	}
	if err := l.Check(ctx); err != nil {
		t.Fatalf("Check after 3 TTLs: %v", err)
	}
	st, _ := c.Status(ctx, "renewed")
	if st.Token != l.Token() || st.TTL <= 0 || st.TTL > 900*time.Millisecond {
		t.Fatalf("status %+v", st)
	}
	if err := l.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := l.Remaining(); r < 3*time.Second || r > 5*time.Second {
		t.Fatalf("remaining after Refresh(5s): %v", r)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNoRenewIsLostBeforeItsDeadline(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	sent := time.Now()
	l, err := c.Lock(ctx, "lapse", TTL(700*time.Millisecond), NoRenew())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed")
	}
	if since := time.Since(sent); since > 700*time.Millisecond && l.Err().(*Error).Reason == LostUnconfirmed {
		// the local guard fires before the deadline counted from the send
		// (the goroutine may be scheduled late on a loaded machine: only
		// log it)
		t.Logf("lost %v after the send", since)
	}
	var e *Error
	if !errors.As(l.Err(), &e) || !errors.Is(e, ErrLost) || (e.Reason != LostUnconfirmed && e.Reason != LostExpired) {
		t.Fatalf("Err %v", l.Err())
	}
	if l.AtRisk() {
		t.Fatal("AtRisk after the loss")
	}
	if err := l.Refresh(ctx, 0); !errors.Is(err, ErrLost) {
		t.Fatalf("Refresh of a lost lease: %v", err)
	}
}

func TestBreakLosesLease(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	l, err := c.Lock(ctx, "breakme", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	op := dial(t, d.addr)
	for _, bad := range []string{"", "two words", strings.Repeat("r", reasonMax+1)} {
		if err := op.Break(ctx, "breakme", l.Token(), bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Break reason %q: %v, want ErrInvalid", bad, err)
		}
	}
	if err := op.Check(ctx, "breakme", l.Token()); err != nil {
		t.Fatalf("Check of the holder's token: %v", err)
	}
	if err := op.Break(ctx, "breakme", l.Token()+1, "test"); !errors.Is(err, ErrLost) {
		t.Fatalf("Break of a token that holds nothing: %v, want ErrLost", err)
	}
	if err := op.Break(ctx, "breakme", l.Token(), "test"); err != nil {
		t.Fatalf("Break: %v", err)
	}
	if err := op.Check(ctx, "breakme", l.Token()); !errors.Is(err, ErrLost) {
		t.Fatalf("Check after the break: %v, want ErrLost", err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed by a BREAK")
	}
	var e *Error
	if !errors.As(l.Err(), &e) || e.Reason != LostExpired || e.BrokenBy == "" {
		t.Fatalf("Err %#v", l.Err())
	}
	// the turn is free again: the client can lock the name anew
	l2, err := c.Lock(ctx, "breakme", TTL(time.Second), Wait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Unlock(ctx)
}

func TestWaitGrantTimeoutCancel(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	l, err := a.Lock(ctx, "q", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// a wait that runs out
	if _, err := b.Lock(ctx, "q", Wait(300*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait(300ms): %v", err)
	}
	// a wait that ctx ends: the server's queue is left
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Lock(cctx, "q")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx-ended wait: %v", err)
	}
	eventually(t, 10*time.Second, "no waiter left", func() bool {
		h, err := a.Holders(ctx, "q")
		return err == nil && len(h.Waiters) == 0
	})
	// a wait that is granted
	res := make(chan *Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l2, err := b.Lock(ctx, "q", TTL(5*time.Second), Wait(30*time.Second))
		errc <- err
		res <- l2
	}()
	eventually(t, 10*time.Second, "b waits", func() bool {
		h, err := a.Holders(ctx, "q")
		return err == nil && len(h.Waiters) == 1 && h.Waiters[0].Owner == b.Owner()
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	l2 := <-res
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), l.Token())
	}
	if r := l2.Remaining(); r <= 0 || r > 5*time.Second {
		t.Fatalf("remaining %v", r)
	}
	_ = l2.Unlock(ctx)
}

func TestTurnsWithinOneClient(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	l, err := c.Lock(ctx, "turn", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "turn"); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLock of a name the client holds: %v", err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, err := c.Lock(ctx, "turn", TTL(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	select {
	case <-got:
		t.Fatal("a second Lock of the client's own lock went through")
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil || l2.Token() <= l.Token() {
		t.Fatal("no new lease after the Unlock")
	}
	_ = l2.Unlock(ctx)
}

func TestSharedAndSemaphore(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a, b, c := dial(t, d.addr), dial(t, d.addr), dial(t, d.addr)
	r1, err := a.Lock(ctx, "rw", Shared(), TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.TryLock(ctx, "rw", Shared(), TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Mode() != "shared" || r1.Token() == r2.Token() {
		t.Fatal("two readers, one token")
	}
	if _, err := c.TryLock(ctx, "rw"); !errors.Is(err, ErrBusy) {
		t.Fatalf("writer beside readers: %v", err)
	}
	h, err := c.Holders(ctx, "rw")
	if err != nil || len(h.Holders) != 2 || h.Status.Mode != "shared" {
		t.Fatalf("holders %+v %v", h, err)
	}
	// a semaphore of 2
	p1, err := a.Lock(ctx, "sem", Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := b.Lock(ctx, "sem", Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "sem", Limit(2)); !errors.Is(err, ErrBusy) {
		t.Fatalf("third permit: %v", err)
	}
	var e *Error
	if _, err := c.TryLock(ctx, "sem"); !errors.Is(err, ErrLimitMismatch) || !errors.As(err, &e) || e.Limit != 2 {
		t.Fatalf("a mutex on a semaphore: %v", err)
	}
	if st, _ := c.Status(ctx, "sem"); st.Mode != "semaphore" || st.Limit != 2 || st.Holders != 2 {
		t.Fatalf("status %+v", st)
	}
	for _, l := range []*Lease{r1, r2, p1, p2} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatch(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	w := dial(t, d.addr)
	c := dial(t, d.addr)
	wctx, stop := context.WithCancel(ctx)
	ch, err := w.Watch(wctx, "job/*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Watch(ctx, "bad name"); err == nil {
		t.Fatal("a pattern with a space was accepted")
	}
	l, err := c.Lock(ctx, "job/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	want := []EventKind{EventGranted, EventReleased}
	for _, k := range want {
		select {
		case ev := <-ch:
			if ev.Kind != k || ev.Name != "job/1" || ev.Owner != c.Owner() || ev.Token != l.Token() {
				t.Fatalf("event %+v, want %s of job/1", ev, k)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", k)
		}
	}
	stop()
	eventually(t, 10*time.Second, "channel closed", func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

func TestEnvironmentAndOwnerKey(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	t.Setenv("DLOCK_SERVERS", d.addr)
	t.Setenv("DLOCK_OWNER", "env-owner")
	a, err := Dial(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Owner() != "env-owner" || len(a.OwnerKey()) < 16 || len(a.ClusterID()) != 32 {
		t.Fatalf("owner %q key %q cluster %q", a.Owner(), a.OwnerKey(), a.ClusterID())
	}
	l, err := a.Lock(ctx, "shared-owner", TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// the same id without its key is refused
	if _, err := Dial(ctx, ""); !errors.Is(err, ErrDenied) {
		t.Fatalf("owner id without its key: %v", err)
	}
	// with its key it is the same owner: another process's lease
	t.Setenv("DLOCK_OWNER", "env-owner="+a.OwnerKey())
	b, err := Dial(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.TryLock(ctx, "shared-owner"); !errors.Is(err, ErrHeldByOwner) {
		t.Fatalf("lock held by the owner elsewhere: %v", err)
	}
	// given back by an UNLOCK the client sends after answering: polled
	eventually(t, 10*time.Second, "the extra hold given back", func() bool {
		st, err := a.Status(ctx, "shared-owner")
		return err == nil && st.Count == 1
	})
	_ = l.Unlock(ctx)
	// a pinned cluster id no server names
	if _, err := Dial(ctx, d.addr, Cluster(strings.Repeat("0", 32))); !errors.Is(err, ErrClusterMismatch) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pinned cluster: %v", err)
	}
	// nobody listening
	if _, err := Dial(ctx, fmt.Sprintf("127.0.0.1:%d", freePort(t)), ConnectTimeout(500*time.Millisecond)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no server: %v", err)
	}
}

func TestRestartedServerRefusesLease(t *testing.T) {
	// a memory-only daemon restarted on the same port forgot the lease:
	// the client reconnects, takes the new cluster id (the same server),
	// and its refresh is refused: Done closes (LostRejected)
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	l, err := c.Lock(ctx, "forgotten", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	id := c.ClusterID()
	d.kill()
	d2 := start(t, "dlockd2", dlockdBin(t), d.port, "--persist", "none", "--port", fmt.Sprint(d.port), "-l", "info")
	d2.waitListening(20 * time.Second)
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Done not closed")
	}
	var e *Error
	if !errors.As(l.Err(), &e) || (e.Reason != LostRejected && e.Reason != LostUnconfirmed) {
		t.Fatalf("Err %v", l.Err())
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if c.ClusterID() == id {
		t.Fatal("the restarted server's cluster id was not taken")
	}
}

func TestCloseLeavesNoGoroutine(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		a, err := Dial(ctx, d.addr)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Dial(ctx, d.addr)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("leak%d", i)
		l, err := a.Lock(ctx, name, TTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Watch(ctx, "*"); err != nil {
			t.Fatal(err)
		}
		waitErr := make(chan error, 1)
		go func() { _, err := b.Lock(ctx, name); waitErr <- err }()
		eventually(t, 10*time.Second, "b waits", func() bool {
			h, err := a.Holders(ctx, name)
			return err == nil && len(h.Waiters) == 1
		})
		b.Close()
		if err := <-waitErr; !errors.Is(err, ErrClosed) {
			t.Fatalf("a wait ended by Close: %v", err)
		}
		a.Close()
		select {
		case <-l.Done():
		default:
			t.Fatal("Done not closed by Close")
		}
		if _, err := a.Lock(ctx, "x"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Lock after Close: %v", err)
		}
		_ = a.Close()
	}
	eventually(t, 10*time.Second, "goroutines back to the count before", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// Unlock with a context that has ended still gives the lease back (found
// from outside: half such calls did nothing, and the lease stayed held
// and renewed for ever).
func TestUnlockWithAnEndedContextStillReleases(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("uc%d", i)
		l, err := c.Lock(ctx, name, TTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(dead) // nil, or the context's error
		if l.Valid() {
			t.Fatalf("%s: still valid after Unlock", name)
		}
		eventually(t, 5*time.Second, name+" free at the server", func() bool {
			st, err := c.Status(ctx, name)
			return err == nil && !st.Held
		})
	}
}
