// elect_test.go: elections on leases (a lease's value: LOCK value=,
// REFRESH value= by Lease.Proclaim, the value in Status, Holders and
// Watch events), as libdlock's an_election_is_held_followed_and_handed_over
// (tests/test_client.c).

package dlockd

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// nextEvent is the next event of ch, which must be of kind k.
func nextEvent(t *testing.T, ch <-chan Event, k EventKind) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("the watch ended, waiting for a %s event", k)
		}
		if ev.Kind != k {
			t.Fatalf("event %+v, want %s", ev, k)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event", k)
	}
	return Event{}
}

// A candidate leads with its value, a second waits with its own; an
// observer reads the leader's value with Status and Holders and hears
// it with Watch; the leader proclaims a value with a space, which the
// observer is told decoded, with the same term; the leader resigns and
// the second leads, in a later term, with its value.
func TestAnElectionIsHeldFollowedAndHandedOver(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	b := dial(t, d.addr)
	o := dial(t, d.addr)
	ch, err := o.Watch(ctx, "elect")
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Lock(ctx, "elect", TTL(10*time.Second), Value("host-a:7000"))
	if err != nil {
		t.Fatal(err)
	}
	term := la.Token()
	ev := nextEvent(t, ch, EventGranted)
	if ev.Value != "host-a:7000" || ev.Token != term || ev.Owner != a.Owner() {
		t.Fatalf("granted %+v, want host-a:7000 of token %d", ev, term)
	}
	st, err := o.Status(ctx, "elect")
	if err != nil {
		t.Fatal(err)
	}
	if st.Value != "host-a:7000" || st.Token != term || st.Owner != a.Owner() {
		t.Fatalf("status %+v, want the leader's value host-a:7000", st)
	}

	type outcome struct {
		l   *Lease
		err error
	}
	second := make(chan outcome, 1)
	go func() {
		l, err := b.Lock(ctx, "elect", TTL(10*time.Second), Value("host-b:7000"))
		second <- outcome{l, err}
	}()
	eventually(t, 10*time.Second, "the second candidate waits", func() bool {
		st, err := o.Status(ctx, "elect")
		return err == nil && st.Waiters == 1
	})

	// the leader says another value: its followers hear it, decoded
	const proclaimed = "host-a:7001 primary"
	if err := la.Proclaim(ctx, proclaimed); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	ev = nextEvent(t, ch, EventValue)
	if ev.Value != proclaimed || ev.Token != term || ev.Owner != a.Owner() || ev.Name != "elect" {
		t.Fatalf("value event %+v, want %q of token %d", ev, proclaimed, term)
	}
	if st, _ := o.Status(ctx, "elect"); st.Value != proclaimed || st.Token != term {
		t.Fatalf("status %+v, want %q", st, proclaimed)
	}
	if h, err := o.Holders(ctx, "elect"); err != nil || len(h.Holders) != 1 || h.Holders[0].Value != proclaimed ||
		h.Status.Value != proclaimed || len(h.Waiters) != 1 {
		t.Fatalf("holders %+v %v, want the leader with %q and one waiter", h, err, proclaimed)
	}
	// as sent: the space escaped (a text value)
	if s := raw(t, d.addr, "STATUS elect")[0]; !strings.Contains(s, " value=host-a:7001%20primary") {
		t.Fatalf("STATUS: %q, want value=host-a:7001%%20primary", s)
	}
	if !la.Valid() || la.Remaining() < 5*time.Second {
		t.Fatalf("after Proclaim: valid %v, remaining %v", la.Valid(), la.Remaining())
	}

	// it resigns: the next candidate leads, in a later term
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch, EventReleased); ev.Token != term {
		t.Fatalf("released %+v, want token %d", ev, term)
	}
	var got outcome
	select {
	case got = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the second candidate was not elected")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	lb := got.l
	if lb.Token() <= term {
		t.Fatalf("term %d not above %d", lb.Token(), term)
	}
	ev = nextEvent(t, ch, EventGranted)
	if ev.Value != "host-b:7000" || ev.Token != lb.Token() || ev.Owner != b.Owner() {
		t.Fatalf("granted %+v, want host-b:7000 of token %d", ev, lb.Token())
	}
	if st, _ := o.Status(ctx, "elect"); st.Value != "host-b:7000" || st.Token != lb.Token() {
		t.Fatalf("status %+v, want host-b:7000", st)
	}
	if err := lb.Proclaim(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Proclaim of an empty value: %v", err)
	}
	if err := la.Proclaim(ctx, "host-a:7002"); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Proclaim after Unlock: %v", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch, EventReleased); ev.Token != lb.Token() || ev.Value != "host-b:7000" {
		t.Fatalf("released %+v, want token %d with its value", ev, lb.Token())
	}
	if st, _ := o.Status(ctx, "elect"); st.Held || st.Value != "" {
		t.Fatalf("status %+v, want free, no value", st)
	}
}

// A deposed leader (its lease broken) cannot proclaim: ErrLost, and the
// lease is lost.
func TestADeposedLeaderCannotProclaim(t *testing.T) {
	d := startDlockd(t)
	ctx := ctxT(t, 60*time.Second)
	a := dial(t, d.addr)
	o := dial(t, d.addr)
	l, err := a.Lock(ctx, "elect", TTL(10*time.Second), Value("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Break(ctx, "elect", l.Token(), "deposed"); err != nil {
		t.Fatal(err)
	}
	err = l.Proclaim(ctx, "host-a2")
	var e *Error
	if !errors.Is(err, ErrLost) || !errors.As(err, &e) {
		t.Fatalf("Proclaim of a broken lease: %v, want ErrLost", err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed")
	}
	if st, _ := o.Status(ctx, "elect"); st.Held {
		t.Fatalf("status %+v, want free", st)
	}
}

// The value goes as a text value: a space and '%' escaped, another byte
// '?', cut at 128 bytes never inside an escape; a LOCK carries it, and
// "" is none.
func TestValueIsSentAsText(t *testing.T) {
	for in, want := range map[string]string{
		"host-a:7001 primary":          "host-a:7001%20primary",
		"50%":                          "50%25",
		"caf\u00e9\t":                  "caf???",
		strings.Repeat(" ", 50):        strings.Repeat("%20", 42),
		strings.Repeat("x", 200):       strings.Repeat("x", 128),
		strings.Repeat("x", 127) + " ": strings.Repeat("x", 127),
	} {
		if got := descEncode(in, valueMax); got != want {
			t.Errorf("value %q sent as %q, want %q", in, got, want)
		}
		if got := descDecode(descEncode(in, valueMax)); in == "host-a:7001 primary" && got != in {
			t.Errorf("%q decoded as %q", in, got)
		}
	}
	ctx := ctxT(t, 30*time.Second)
	addr, locks := versionFake(t, "0.4.0")
	c := dial(t, addr, Describe(false))
	if _, err := c.Lock(ctx, "a", TTL(30*time.Second), Value("10.0.0.7 :8080")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "b", TTL(30*time.Second), Value("")); err != nil {
		t.Fatal(err)
	}
	got := locks()
	if len(got) != 2 || !strings.Contains(got[0], " value=10.0.0.7%20:8080") || strings.Contains(got[1], "value=") {
		t.Fatalf("LOCK lines %q", got)
	}
}

// A RECLAIM (Redis forgot the lease) says the lease's value again, as
// its last grant or proclaim gave it.
func TestReclaimSaysTheLeasesValue(t *testing.T) {
	c := &Client{}
	l := &Lease{c: c, name: "elect", token: 9, mode: "exclusive", limit: 1,
		proof: strings.Repeat("ab", 16), until: 12345, value: "host-a:7001%20primary"}
	s := c.format(&req{op: "RECLAIM", name: "elect", token: 9, ttl: 10000, lease: l}, 0)
	if !strings.HasPrefix(s, "RECLAIM elect 9 proof=") || !strings.Contains(s, " value=host-a:7001%20primary ") {
		t.Fatalf("RECLAIM line %q, want value=host-a:7001%%20primary", s)
	}
	l.value = ""
	if s := c.format(&req{op: "RECLAIM", name: "elect", token: 9, ttl: 10000, lease: l}, 0); strings.Contains(s, "value=") {
		t.Fatalf("RECLAIM line %q of a lease without a value", s)
	}
	// a renewal says no value (the lease keeps its own)
	if s := c.format(&req{op: "RENEW", name: "elect", token: 9, ttl: 10000, lease: l}, 0); strings.Contains(s, "value=") {
		t.Fatalf("RENEW line %q", s)
	}
}

// A * WATCH's value= is decoded on every kind; a <what> this client does
// not know (a later server's) is ignored.
func TestWatchEventValuesAndUnknownKinds(t *testing.T) {
	c := &Client{}
	w := &watch{patterns: []string{"elect"}, ch: make(chan Event, 8)}
	c.watches = []*watch{w}
	for _, s := range []string{
		"* WATCH elect granted a 7 holders=1 value=host-a",
		"* WATCH elect anointed a 7 holders=1 value=host-x",
		"* WATCH elect value a 7 holders=1 value=host-a%3A7001%20primary",
		"* WATCH elect released a 7 holders=0 value=host-a%3A7001%20primary",
		"* WATCH elect expired b 8 holders=0",
	} {
		r := parseReply(s)
		if r == nil {
			t.Fatalf("not parsed: %q", s)
		}
		c.event(r, 0)
		if c.insane {
			t.Fatalf("%q taken for a broken server", s)
		}
	}
	close(w.ch)
	var got []Event
	for ev := range w.ch {
		got = append(got, ev)
	}
	want := []Event{
		{Kind: EventGranted, Name: "elect", Owner: "a", Token: 7, Holders: 1, Value: "host-a"},
		{Kind: EventValue, Name: "elect", Owner: "a", Token: 7, Holders: 1, Value: "host-a:7001 primary"},
		{Kind: EventReleased, Name: "elect", Owner: "a", Token: 7, Value: "host-a:7001 primary"},
		{Kind: EventExpired, Name: "elect", Owner: "b", Token: 8},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
