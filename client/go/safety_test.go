// safety_test.go: the client never believes in a lease longer than the
// server does, against a real dlockd frozen with SIGSTOP (it reads
// nothing and answers nothing) or with the client's own goroutine held
// up: loss before the deadline counted from the send, a shortening
// Refresh counted from its send, a grant counted from its send (an event
// grant from its confirmation), loss detection that no blocked write
// delays, Valid and Err that do not wait for the client's goroutine,
// Unlock's unconfirmed release, a TryLock of a lease another process of
// the owner holds, and the local usage errors.
//
// Times are read on the client's own clock (nowMs, CLOCK_BOOTTIME) and
// asserted as ranges with margins for a loaded machine; each bound is one
// a client that counts wrongly misses by hundreds of milliseconds.

package dlockd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// internals reads the lease's local deadline and lost guard (ms, nowMs's
// clock) on the manager goroutine.
func internals(t *testing.T, c *Client, l *Lease) (deadline, guard float64) {
	t.Helper()
	c.execAlways(func() { deadline, guard = l.deadlineM, c.guardMs(l.ttl) })
	return
}

// waitDone waits for Done and returns when it was seen closed (nowMs).
func waitDone(t *testing.T, l *Lease, within time.Duration) float64 {
	t.Helper()
	select {
	case <-l.Done():
		return nowMs()
	case <-time.After(within):
		t.Fatalf("Done not closed within %v", within)
	}
	return 0
}

func wantUnconfirmed(t *testing.T, l *Lease) {
	t.Helper()
	var e *Error
	if !errors.As(l.Err(), &e) || !errors.Is(e, ErrLost) || e.Reason != LostUnconfirmed {
		t.Fatalf("Err %v, want a loss for reason unconfirmed", l.Err())
	}
}

// frozenLoss: a renewed lease of a daemon frozen right after the grant
// (flood: while requests are sent to it, far more than it could buffer).
func frozenLoss(t *testing.T, flood bool) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr, ServerTimeout(8*time.Second))
	ttl := 3000.0
	if flood {
		ttl = 6000 // time for megabytes to pile up
	}
	sent := nowMs() // before Lock: its request is sent after this
	l, err := c.Lock(ctx, "frozen", TTL(time.Duration(ttl)*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGSTOP)
	stopped := nowMs()
	// Every request the server confirmed was sent before it stopped; a
	// renewal is sent TTL/3 after the grant's request at the earliest.
	bound := sent + ttl
	if stopped-sent >= ttl/3 {
		bound = stopped + ttl
		t.Logf("stopped %.0f ms after the send: a renewal may have been confirmed", stopped-sent)
	}
	var wg sync.WaitGroup
	var flooded int64
	stop := make(chan struct{})
	if flood {
		// WATCH lines of long patterns, a thousand to a call: megabytes
		// within the TTL, past what the sockets buffer
		for i := 0; i < 4; i++ {
			var pats []string
			for j := 0; j < 1000; j++ {
				pats = append(pats, fmt.Sprintf("%s%d-%d*", strings.Repeat("f", 240), i, j))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					fctx, cancel := context.WithTimeout(ctx, time.Millisecond)
					_, _ = c.Watch(fctx, pats...)
					cancel()
					atomic.AddInt64(&flooded, int64(len(pats)))
				}
			}()
		}
	}
	doneAt := waitDone(t, l, 15*time.Second)
	var why string
	var seq int
	c.execAlways(func() { why, seq = c.lastError, c.seq })
	t.Logf("requests formatted %d; last error: %s", seq, why)
	close(stop)
	wg.Wait()
	wantUnconfirmed(t, l)
	if l.Valid() {
		t.Fatal("Valid after the loss")
	}
	dl, guard := internals(t, c, l)
	t.Logf("Done %.0f ms after the send (TTL %.0f; local deadline at %.0f, guard %.0f); %d requests flooded", doneAt-sent, ttl, dl-sent, guard, atomic.LoadInt64(&flooded))
	if doneAt >= bound {
		t.Fatalf("Done closed %.0f ms after the send: not before the lease could end at the server (%.0f ms)", doneAt-sent, bound-sent)
	}
	if dl > bound {
		t.Fatalf("local deadline %.0f ms after the send, past the server's %.0f", dl-sent, bound-sent)
	}
	if doneAt >= dl {
		t.Fatalf("Done closed %.0f ms past the local deadline", doneAt-dl)
	}
	if doneAt < dl-guard-5 {
		t.Fatalf("Done closed %.0f ms before the local deadline less the guard", dl-guard-doneAt)
	}
	// Close does not hang on a server that reads nothing
	start := time.Now()
	c.Close()
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("Close took %v", el)
	}
}

// (a) a daemon frozen with SIGSTOP: the lease is lost before the
// deadline counted from its request's send, for want of confirmation.
func TestFrozenDaemonLosesLeaseInTime(t *testing.T) { frozenLoss(t, false) }

// S1: requests flooding a daemon that reads nothing do not delay the loss
// (the manager never blocks on a write).
func TestFloodOfFrozenDaemonDoesNotDelayLoss(t *testing.T) { frozenLoss(t, true) }

// (c) a shortening Refresh counts from its send, even unanswered.
func TestShorteningRefreshCountsFromSend(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr, LostGuard(150*time.Millisecond))
	l, err := c.Lock(ctx, "shorten", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGSTOP)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sent := nowMs()
	go func() { _ = l.Refresh(rctx, 400*time.Millisecond) }()
	doneAt := waitDone(t, l, 5*time.Second)
	wantUnconfirmed(t, l)
	t.Logf("Done %.0f ms after Refresh(400ms) was called", doneAt-sent)
	if doneAt-sent >= 400 {
		t.Fatalf("Done closed %.0f ms after Refresh(400ms) was sent: the server may have ended it", doneAt-sent)
	}
}

// stall holds c's manager goroutine up for d once cond (run there) is
// true, polling until then; it returns when the stall began.
func stall(t *testing.T, c *Client, d time.Duration, cond func() bool) <-chan struct{} {
	t.Helper()
	began := make(chan struct{})
	go func() {
		end := time.Now().Add(20 * time.Second)
		for time.Now().Before(end) {
			ok := false
			if !c.execAlways(func() {
				if cond() {
					ok = true
					close(began)
					time.Sleep(d)
				}
			}) || ok {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return began
}

func inFifo(c *Client, op, name string) bool {
	for _, q := range c.fifo {
		if q.op == op && q.name == name {
			return true
		}
	}
	return false
}

// neverAboveServer: what the client counts is never more than what the
// server has left of the lease (Remaining read after STATUS's reply).
func neverAboveServer(t *testing.T, c *Client, l *Lease) {
	t.Helper()
	st, err := c.Status(ctxT(t, 20*time.Second), l.Name())
	if err != nil {
		t.Fatal(err)
	}
	r := l.Remaining()
	t.Logf("remaining %v, the server's %v", r, st.TTL)
	if st.Token != l.Token() || r > st.TTL+2*time.Millisecond {
		t.Fatalf("local remaining %v above the server's %v (token %d, %d)", r, st.TTL, l.Token(), st.Token)
	}
}

// lockStalled sends a TRYLOCK of name as Lock does, and holds the
// client's goroutine up for d right after handing it for sending: its
// reply is read d later. sent is read just before.
func lockStalled(t *testing.T, c *Client, name string, ttl float64, d time.Duration) (l *Lease, sent float64) {
	t.Helper()
	var q *req
	c.execAlways(func() {
		sent = nowMs()
		q = &req{op: "LOCK", name: name, waitEnd: never, renew: true, ttl: ttl, done: make(chan struct{})}
		c.setReqDeadline(q, sent+c.serverTimeoutMs())
		c.submit(q, sent)
		c.flush()
		time.Sleep(d)
	})
	select {
	case <-q.done:
	case <-time.After(20 * time.Second):
		t.Fatal("no reply")
	}
	if q.err != nil {
		t.Fatal(q.err)
	}
	return q.result.(*Lease), sent
}

// (d) a grant whose reply is read late (the client's goroutine held up
// 500 ms after the LOCK was sent) counts from the send, not the reply.
func TestGrantCountsFromSend(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	const ttl = 10000.0
	l, sent := lockStalled(t, c, "late", ttl, 500*time.Millisecond)
	now := nowMs()
	r := float64(l.Remaining()) / 1e6
	t.Logf("reply read %.0f ms after the send; remaining %.0f ms", now-sent, r)
	// at most the TTL less the time since the send (+ 20 ms for a
	// loaded machine; a count from the reply is 500 ms above)
	if r > ttl-(now-sent)+20 {
		t.Fatalf("remaining %.0f ms, above TTL - %.0f ms since the send", r, now-sent)
	}
	if r <= 0 {
		t.Fatal("nothing remains")
	}
	neverAboveServer(t, c, l)
	_ = l.Unlock(ctx)
}

// An event grant (* GRANTED after a wait) read late counts from the
// confirming REFRESH, not from the event: the server's TTL began when it
// granted.
func TestEventGrantCountsFromConfirmation(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	la, err := a.Lock(ctx, "ev", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := b.Lock(ctx, "ev", TTL(10*time.Second), Wait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "b waits", func() bool {
		h, err := a.Holders(ctx, "ev")
		return err == nil && len(h.Waiters) == 1
	})
	select {
	case <-stall(t, b, 600*time.Millisecond, func() bool { return len(b.waiting) == 1 }):
	case <-time.After(20 * time.Second):
		t.Fatal("b does not wait")
	}
	if err := la.Unlock(ctx); err != nil { // granted to b now; b reads it 600 ms later
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		t.FailNow()
	}
	neverAboveServer(t, b, lb)
	_ = lb.Unlock(ctx)
}

// S2: Valid and Err tell the loss at the local deadline less the guard,
// even while the client's goroutine is held up and Done is not closed.
func TestValidAndErrDoNotWaitForTheClient(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	l, err := c.Lock(ctx, "v", TTL(800*time.Millisecond), NoRenew())
	if err != nil {
		t.Fatal(err)
	}
	if !l.Valid() || l.Err() != nil {
		t.Fatalf("a new lease: valid %v, err %v", l.Valid(), l.Err())
	}
	dl, guard := internals(t, c, l)
	if wait := dl - guard - nowMs() - 100; wait > 0 {
		time.Sleep(time.Duration(wait * 1e6))
	}
	if now := nowMs(); now >= dl-guard {
		t.Logf("late: %.0f ms past the guard already", now-(dl-guard))
	}
	<-stall(t, c, 1500*time.Millisecond, func() bool { return true })
	for nowMs() < dl-guard+20 {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-l.Done():
		t.Log("Done closed already (the stall began late)")
	default:
	}
	if l.Valid() {
		t.Fatal("Valid past the local deadline less the guard")
	}
	wantUnconfirmed(t, l)
	if l.Remaining() != 0 {
		t.Fatalf("remaining %v", l.Remaining())
	}
	waitDone(t, l, 10*time.Second)
	wantUnconfirmed(t, l)
}

// A1: an UNLOCK the server does not answer within ServerTimeout is
// ErrUnconfirmed, not success.
func TestUnlockUnansweredIsUnconfirmed(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr, ServerTimeout(700*time.Millisecond))
	l, err := c.Lock(ctx, "u", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGSTOP)
	err = l.Unlock(ctx)
	if !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("Unlock of a frozen daemon: %v", err)
	}
	if l.Valid() {
		t.Fatal("Valid after Unlock")
	}
	t.Logf("Unlock: %v", err)
}

// S3: a TryLock of a lease another client of the owner holds (with a
// longer TTL than asked) is ErrHeldByOwner; the connection is kept and
// the extra hold given back.
func TestHeldByOwnerElsewhereKeepsConnection(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr, Owner("two-procs"))
	b := dial(t, d.addr, Owner("two-procs="+a.OwnerKey()))
	l, err := a.Lock(ctx, "both", TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var gen int
	b.execAlways(func() { gen = b.gen })
	_, err = b.TryLock(ctx, "both", TTL(time.Second))
	if !errors.Is(err, ErrHeldByOwner) {
		t.Fatalf("TryLock of the owner's lease held elsewhere: %v", err)
	}
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var gen2 int
	b.execAlways(func() { gen2 = b.gen })
	if gen2 != gen {
		t.Fatal("the connection was dropped")
	}
	eventually(t, 10*time.Second, "the extra hold given back", func() bool {
		st, err := a.Status(ctx, "both")
		return err == nil && st.Count == 1 && st.Token == l.Token()
	})
	_ = l.Unlock(ctx)
}

// A2: bad options are local usage errors (ErrInvalid), sent nowhere.
func TestInvalidArguments(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr)
	for what, opts := range map[string][]LockOption{
		"TTL(0)":          {TTL(0)},
		"TTL(-1s)":        {TTL(-time.Second)},
		"Limit(1)":        {Limit(1)},
		"Limit(0)":        {Limit(0)},
		"Limit(1025)":     {Limit(1025)},
		"Shared+Limit(2)": {Shared(), Limit(2)},
	} {
		if _, err := c.TryLock(ctx, "inv", opts...); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrServer) {
			t.Errorf("%s: %v", what, err)
		}
	}
	for _, name := range []string{"", "a b", "a=b", strings.Repeat("n", nameMax+1)} {
		if _, err := c.Lock(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("lock name %q: %v", name, err)
		}
		if _, err := c.Status(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("status of %q: %v", name, err)
		}
	}
	if _, err := c.Watch(ctx); !errors.Is(err, ErrInvalid) {
		t.Errorf("Watch(): %v", err)
	}
	if _, err := c.Watch(ctx, "a b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Watch(a b): %v", err)
	}
	for what, f := range map[string]func() error{
		"servers": func() error { _, err := Dial(ctx, "host:99999"); return err },
		"owner":   func() error { _, err := Dial(ctx, d.addr, Owner("a b")); return err },
		"key":     func() error { _, err := Dial(ctx, d.addr, OwnerKey("short")); return err },
		"cluster": func() error { _, err := Dial(ctx, d.addr, Cluster("xyz")); return err },
	} {
		if err := f(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Dial, bad %s: %v", what, err)
		}
	}
	// a semaphore of 2 is fine
	l, err := c.TryLock(ctx, "inv", Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
}

// C2: the bytes a Read returns with its error are read first (a TLS
// connection returns the server's last line with io.EOF).
type lastBytesConn struct {
	net.Conn
	reads []string
}

func (f *lastBytesConn) Read(b []byte) (int, error) {
	if len(f.reads) == 0 {
		return 0, io.EOF
	}
	s := f.reads[0]
	f.reads = f.reads[1:]
	n := copy(b, s)
	if len(f.reads) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func TestReaderKeepsBytesReadWithAnError(t *testing.T) {
	// many lines split across reads, then the last with io.EOF
	var reads []string
	var want []string
	for i := 0; i < 2000; i++ {
		s := strings.Repeat("x", i%300) + "\r\n"
		want = append(want, strings.TrimSuffix(s, "\r\n"))
		reads = append(reads, s[:len(s)/2], s[len(s)/2:])
	}
	reads = append(reads, "* BYE not-active active=127.0.0.1:1\r\n")
	want = append(want, "* BYE not-active active=127.0.0.1:1")
	c := &Client{inbox: make(chan inMsg, len(want)+1), quit: make(chan struct{})}
	c.wg.Add(1)
	c.reader(7, &lastBytesConn{reads: reads})
	for i, w := range want {
		m := <-c.inbox
		if m.err != nil || m.line != w || m.gen != 7 {
			t.Fatalf("message %d: %q %v, want %q", i, m.line, m.err, w)
		}
	}
	if m := <-c.inbox; !errors.Is(m.err, io.EOF) {
		t.Fatalf("then %q %v, want io.EOF", m.line, m.err)
	}
}

// holdProxy forwards a client's connections to addr; armed, it keeps
// back the first REFRESH a client sends (and signals held); muted, it
// discards what the server sends (setMute); and cut() closes every
// connection it carries.
type holdProxy struct {
	t     *testing.T
	ln    net.Listener
	addr  string
	mu    sync.Mutex
	armed bool
	muted bool
	held  chan struct{}
	conns []net.Conn
}

func startHoldProxy(t *testing.T, to string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{t: t, ln: ln, addr: ln.Addr().String(), held: make(chan struct{}, 1)}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", to)
			if err != nil {
				cc.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, cc, sc)
			p.mu.Unlock()
			go func() {
				defer cc.Close()
				b := make([]byte, 32768)
				for {
					n, err := sc.Read(b)
					p.mu.Lock()
					muted := p.muted
					p.mu.Unlock()
					if n > 0 && !muted {
						if _, werr := cc.Write(b[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				r := bufio.NewReader(cc)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						sc.Close()
						return
					}
					p.mu.Lock()
					hold := p.armed && strings.HasPrefix(line, "REFRESH ")
					if hold {
						p.armed = false
					}
					p.mu.Unlock()
					if hold {
						p.held <- struct{}{}
						continue
					}
					if _, err := sc.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// setMute: on, what the server sends from now on is discarded.
func (p *holdProxy) setMute(on bool) {
	p.mu.Lock()
	p.muted = on
	p.mu.Unlock()
}

func (p *holdProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A wait given up while the grant's confirmation is on its way, then the
// connection lost: the hold the server granted is given back after the
// reconnect (found from outside: it stayed held for its TTL).
func TestAGrantCrossingAGiveUpIsReleasedOverADrop(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	b := dial(t, d.addr)
	p := startHoldProxy(t, d.addr)
	w := dial(t, p.addr)
	lb, err := b.Lock(ctx, "z", TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := w.Lock(wctx, "z", TTL(30*time.Second))
		done <- err
	}()
	eventually(t, 10*time.Second, "w queued", func() bool {
		st, err := b.Status(ctx, "z")
		return err == nil && st.Waiters == 1
	})
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.held: // w was granted z; its confirmation is kept back
	case <-time.After(10 * time.Second):
		t.Fatal("no confirmation of the grant")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the given-up Lock returned a lease")
	}
	p.cut()
	eventually(t, 10*time.Second, "z free again", func() bool {
		st, err := b.Status(ctx, "z")
		return err == nil && !st.Held
	})
}
