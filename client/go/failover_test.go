// failover_test.go: fail-over across two real dlockd nodes sharing a real
// redis-server: a held lease survives the SIGKILL of the active daemon
// when the take-over completes in time (same token), is lost (Done) when
// it cannot, and a deposed active's BYE not-active sends the client on.

package dlockd

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// role is what the daemon's HELLO says of itself ("" if it does not answer).
func role(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "HELLO\r\n")
	s, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return ""
	}
	for _, w := range strings.Fields(s) {
		if strings.HasPrefix(w, "role=") {
			return w[5:]
		}
	}
	return ""
}

type cluster struct {
	redis, a, b *proc
	servers     string
}

// startCluster: node a active, node b its standby.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dlockdBin(t)
	r := startRedis(t)
	a := startNode(t, r, "a", freePort(t))
	a.waitListening(20 * time.Second)
	eventually(t, 30*time.Second, "node a active", func() bool { return role(a.addr) == "active" })
	b := startNode(t, r, "b", freePort(t))
	b.waitListening(20 * time.Second)
	eventually(t, 30*time.Second, "node b standby", func() bool { return role(b.addr) == "standby" })
	return &cluster{redis: r, a: a, b: b, servers: a.addr + "," + b.addr}
}

func TestFailoverKeepsLease(t *testing.T) {
	cl := startCluster(t)
	ctx := ctxT(t, 120*time.Second)
	c := dial(t, cl.servers)
	w := dial(t, cl.servers)
	l, err := c.Lock(ctx, "fo", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *Lease
		err error
	}
	waited := make(chan res, 1)
	go func() {
		l2, err := w.Lock(ctx, "fo", TTL(5*time.Second), Wait(90*time.Second))
		waited <- res{l2, err}
	}()
	eventually(t, 20*time.Second, "w waits at node a", func() bool {
		h, err := c.Holders(ctx, "fo")
		return err == nil && len(h.Waiters) == 1
	})
	cl.a.kill()
	// the client finds node b once it took over, confirms its lease there,
	// and w's LOCK is sent again there
	eventually(t, 60*time.Second, "node b active", func() bool { return role(cl.b.addr) == "active" })
	eventually(t, 30*time.Second, "the lease confirmed at node b", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return l.Check(cctx) == nil
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lost over the fail-over: %v", err)
	}
	st, err := c.Status(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Token != l.Token() || st.Owner != c.Owner() {
		t.Fatalf("status at node b: %+v (token %d)", st, l.Token())
	}
	eventually(t, 30*time.Second, "w waits again at node b", func() bool {
		h, err := c.Holders(ctx, "fo")
		return err == nil && len(h.Waiters) == 1 && h.Waiters[0].Owner == w.Owner() && !h.Waiters[0].Restored
	})
	eventually(t, 30*time.Second, "renewals confirmed again", func() bool { return !l.AtRisk() })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiter: %v", r.err)
		}
		if r.l.Token() <= l.Token() {
			t.Fatalf("token %d not above %d", r.l.Token(), l.Token())
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted after the Unlock")
	}
	select {
	case <-l.Done():
		t.Fatalf("Done closed: %v", l.Err())
	default:
	}
}

func TestFailoverTooSlowLosesLease(t *testing.T) {
	cl := startCluster(t)
	ctx := ctxT(t, 120*time.Second)
	// a guard of 200 ms: margin for a loaded machine
	c := dial(t, cl.servers, LostGuard(200*time.Millisecond))
	w := dial(t, cl.servers)
	// shorter than the take-over (the leadership lease is 2s): it cannot
	// be confirmed in time
	l, err := c.Lock(ctx, "short", TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl.a.kill()
	killed := nowMs() // every confirmation was sent before this
	doneAt := waitDone(t, l, 10*time.Second)
	wantUnconfirmed(t, l)
	dl, guard := internals(t, c, l)
	t.Logf("Done %.0f ms after the kill; local deadline %.0f ms after it, guard %.0f", doneAt-killed, dl-killed, guard)
	// the local deadline never lies past what node a could have granted,
	// and Done closes before it
	if dl > killed+600 {
		t.Fatalf("local deadline %.0f ms after the kill, past the TTL", dl-killed)
	}
	if doneAt >= dl {
		t.Fatalf("Done closed %.0f ms after the local deadline", doneAt-dl)
	}
	// someone else gets it at node b, with a larger token, and its lease
	// began (at node b) after Done closed here
	l2, err := w.Lock(ctx, "short", TTL(5*time.Second), Wait(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.Status(ctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	began := nowMs() - float64(st.HeldFor)/1e6
	if l2.Token() <= l.Token() || st.Token != l2.Token() {
		t.Fatalf("token %d after %d (status %+v)", l2.Token(), l.Token(), st)
	}
	if began < doneAt-5 {
		t.Fatalf("the new lease began %.0f ms before Done closed", doneAt-began)
	}
	// and the client itself goes on at node b
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_ = l2.Unlock(ctx)
}

func TestDeposedActiveSaysBye(t *testing.T) {
	cl := startCluster(t)
	ctx := ctxT(t, 120*time.Second)
	c := dial(t, cl.servers)
	l, err := c.Lock(ctx, "bye", TTL(12*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// node a paused past its leadership: b takes over; a, resumed, finds
	// itself deposed and tells its clients * BYE not-active active=<b>
	cl.a.signal(syscall.SIGSTOP)
	stopped := time.Now()
	eventually(t, 30*time.Second, "node b active", func() bool { return role(cl.b.addr) == "active" })
	eventually(t, 15*time.Second, "the lease at risk (renewal overdue)", func() bool { return l.AtRisk() })
	if d := time.Since(stopped); d < 7*time.Second {
		time.Sleep(7*time.Second - d)
	}
	cl.a.signal(syscall.SIGCONT)
	eventually(t, 30*time.Second, "renewals confirmed at node b", func() bool { return !l.AtRisk() && l.Err() == nil })
	st, err := c.Status(ctx, "bye")
	if err != nil {
		t.Fatal(err)
	}
	if st.Token != l.Token() {
		t.Fatalf("status %+v, token %d", st, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A client whose active daemon stops answering (stopped, hung) goes to
// the standby that takes over, and keeps its lease there (found from
// outside: the client stayed on the stopped daemon for ever, its calls
// timing out, its lease lost at its deadline).
func TestAStoppedActiveIsLeftForTheStandby(t *testing.T) {
	cl := startCluster(t)
	ctx := ctxT(t, 120*time.Second)
	c, err := Dial(ctx, cl.servers, ServerTimeout(time.Second), ConnectTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Lock(ctx, "st", TTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cl.a.signal(syscall.SIGSTOP) // left stopped; the cleanup's SIGKILL ends it
	eventually(t, 30*time.Second, "node b active", func() bool { return role(cl.b.addr) == "active" })
	eventually(t, 20*time.Second, "the client answered by node b", func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return c.Ping(pctx) == nil
	})
	if !l.Valid() || l.Err() != nil {
		t.Fatalf("the lease did not survive: valid %v, err %v", l.Valid(), l.Err())
	}
	b := dial(t, cl.b.addr)
	st, err := b.Status(ctx, "st")
	if err != nil || !st.Held || st.Token != l.Token() {
		t.Fatalf("node b: %+v, %v; want held with token %d", st, err, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
