// hostile_test.go: a server that says what no dlockd says, played by a
// fake on a loopback port: the client must fail the call in time, bound
// what it sends and what it keeps, and never hang (found from outside).

package dlockd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer answers HELLO (and MAP) as an active dlockd would, and every other
// request line with what answer returns for it (its words, the id= tag
// taken off); lines are sent with the request's tag.
type fakeServer struct {
	addr    string
	unlocks atomic.Int64
}

func startFake(t *testing.T, answer func(words []string) []string) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				w := bufio.NewWriter(c)
				for {
					s, err := r.ReadString('\n')
					if err != nil {
						return
					}
					words := strings.Fields(s)
					tag := ""
					if n := len(words); n > 0 && strings.HasPrefix(words[n-1], "id=") {
						tag, words = words[n-1][3:], words[:n-1]
					}
					var out []string
					switch {
					case len(words) == 0:
					case words[0] == "HELLO":
						out = []string{"OK HELLO version=0.4.0 owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=-"}
					case words[0] == "DESCRIBE", words[0] == "AUTH":
						out = []string{"OK " + words[0]}
					case words[0] == "MAP":
						out = []string{"OK MAP 0 0"} // not partitioned
					default:
						if words[0] == "UNLOCK" {
							f.unlocks.Add(1)
						}
						out = answer(words)
					}
					for i, l := range out {
						if i == 0 && tag != "" {
							l += " id=" + tag
						}
						w.WriteString(l + "\r\n")
					}
					if w.Flush() != nil {
						return
					}
				}
			}()
		}
	}()
	return f
}

func hostileDial(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(ctxT(t, 10*time.Second), addr, ServerTimeout(time.Second), Describe(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A TRYLOCK answered OK QUEUED fails at once as a protocol error.
func TestATryQueuedIsAProtocolError(t *testing.T) {
	f := startFake(t, func(w []string) []string {
		return []string{fmt.Sprintf("OK QUEUED %s 1", w[1])}
	})
	c := hostileDial(t, f.addr)
	done := make(chan error, 1)
	go func() { _, err := c.TryLock(context.Background(), "x"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("TryLock: %v, want ErrProtocol", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock hangs on a queued try")
	}
}

// UNLOCK answered OK HELD with a count that never goes down: a few
// UNLOCKs, not millions, and Unlock returns.
func TestAnUnlockHeldForEverIsBounded(t *testing.T) {
	f := startFake(t, func(w []string) []string {
		switch w[0] {
		case "LOCK", "TRYLOCK":
			return []string{fmt.Sprintf("OK GRANTED %s 7 30000 holds=1", w[1])}
		case "REFRESH":
			return []string{fmt.Sprintf("OK REFRESHED %s 30000", w[1])}
		case "UNLOCK":
			return []string{fmt.Sprintf("OK HELD %s 5", w[1])}
		}
		return []string{"ERR BAD_FORMAT"}
	})
	c := hostileDial(t, f.addr)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "x", TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	time.Sleep(500 * time.Millisecond)
	if n := f.unlocks.Load(); n > 10 {
		t.Fatalf("%d UNLOCKs sent to a server that says HELD for ever", n)
	}
}

// A HOLDERS body of thousands of long lines is refused past a few MiB.
func TestAHugeHoldersBodyIsRefused(t *testing.T) {
	long := strings.Repeat("a", 2000)
	f := startFake(t, func(w []string) []string {
		if w[0] != "HOLDERS" {
			return []string{"ERR BAD_FORMAT"}
		}
		out := []string{fmt.Sprintf("OK HOLDERS %s 3000 holders=3000 waiters=0 mode=exclusive limit=1 more=0", w[1])}
		for i := 0; i < 3000; i++ {
			out = append(out, fmt.Sprintf("holder o%d token=%d ttl_ms=1000 count=1 mode=exclusive held_ms=0 cmd=%s", i, i+1, long))
		}
		return out
	})
	c := hostileDial(t, f.addr)
	_, err := c.Holders(ctxT(t, 10*time.Second), "x")
	if err == nil {
		t.Fatal("a 6 MB HOLDERS body was taken")
	}
}

// A server that answers HELLO and then closes is reconnected to with a
// growing pause, not in a loop.
func TestASessionThatEndsAtOnceBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				s, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				tag := ""
				if i := strings.LastIndex(s, " id="); i >= 0 {
					tag = " " + strings.TrimSpace(s[i+1:])
				}
				fmt.Fprintf(c, "OK HELLO version=0.4.0 owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=-%s\r\n", tag)
				time.Sleep(10 * time.Millisecond)
			}()
		}
	}()
	c := hostileDial(t, ln.Addr().String())
	time.Sleep(2 * time.Second)
	c.Close()
	if n := conns.Load(); n > 30 {
		t.Fatalf("%d connections in 2 s to a server that closes after HELLO", n)
	}
}

// A wait given up, then a LOCK of the same name with a shorter TTL: the
// server grants the second as a reentry of the first's grant, which the
// client is giving back, with the longer TTL left (holds=2). That is a
// grant, not a broken server (found from outside: the connection was
// dropped as insane, 29 times in 200).
func TestAReentryOfAGivenUpGrantKeepsItsLongerTTL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	first := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		var tag1 string
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				return
			}
			w := strings.Fields(s)
			tag := strings.TrimPrefix(w[len(w)-1], "id=")
			switch w[0] {
			case "HELLO":
				fmt.Fprintf(c, "OK HELLO version=0.4.0 owner=fake key=fake-key-0123456789 user=default auth=none role=active cluster=- id=%s\r\n", tag)
			case "LOCK":
				if tag1 == "" {
					tag1 = tag // answered with the second, in order
					close(first)
					continue
				}
				fmt.Fprintf(c, "OK GRANTED n 7 10000 holds=1 id=%s\r\nOK GRANTED n 7 9990 holds=2 id=%s\r\n", tag1, tag)
			case "UNLOCK":
				fmt.Fprintf(c, "OK HELD n 1 id=%s\r\n", tag)
			case "REFRESH":
				fmt.Fprintf(c, "OK REFRESHED n 9990 id=%s\r\n", tag)
			default:
				fmt.Fprintf(c, "OK %s id=%s\r\n", w[0], tag)
			}
		}
	}()
	c := hostileDial(t, ln.Addr().String())
	ctx := ctxT(t, 10*time.Second)
	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Lock(gone, "n", TTL(10*time.Second)); done <- err }()
	<-first
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the given-up Lock returned a lease")
	}
	l, err := c.Lock(ctx, "n", TTL(time.Second))
	if err != nil {
		t.Fatalf("the reentry was refused: %v", err)
	}
	if l.Token() != 7 || !l.Valid() {
		t.Fatalf("token %d valid %v", l.Token(), l.Valid())
	}
}
