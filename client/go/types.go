// types.go: the values the client returns: a lock's Status, its Holders,
// and the Events of a Watch.

package dlockd

import (
	"strings"
	"time"
)

// Status is a lock as STATUS describes it; Token, TTL, Count and Owner
// are its first holder's.
type Status struct {
	Name      string
	Held      bool
	Token     uint64
	TTL       time.Duration // what remains of the first holder's lease
	Count     int           // its reentrant holds
	Owner     string        // "" when free
	User      string        // the owner's user, when not the default one
	Waiters   int
	Mode      string // "exclusive", "shared", "semaphore"; "" when free
	Limit     int
	Holders   int
	HeldFor   time.Duration // how long the first holder has held it
	Host      string        // who the first holder said it is (HELLO host= pid= cmd=)
	PID       int
	Cmd       string
	Delay     time.Duration // the lock's lock-delay (0: none)
	DelayLeft time.Duration // what is left of it while it runs
	Closed    time.Duration // grants are closed this long (Redis forgot leases)
	Value     string        // the first holder's value (Value, Proclaim: an elected leader's), decoded; "" when none
}

// Holder is a holder or a waiter of a lock (HOLDERS).
type Holder struct {
	Owner    string
	User     string
	Waiter   bool
	Mode     string        // "exclusive" or "shared"
	Token    uint64        // holder
	TTL      time.Duration // holder: what remains of its lease; NO BUSY: when the first holder in the way is due to leave
	Count    int           // holder: reentrant holds
	Position int           // waiter: 1 is next
	Wait     time.Duration // waiter: what remains of its wait; -1: forever
	Restored bool          // waiter restored after a restart, not back yet
	HeldFor  time.Duration // holder
	Host     string
	PID      int
	Cmd      string
	Value    string // holder: its lease's value, decoded ("" when none)
}

// Holders is every holder (in grant order) and waiter (in queue order) of
// a lock, with its status; More counts those the server left out.
type Holders struct {
	Status  Status
	Holders []Holder
	Waiters []Holder
	More    int
}

// EventKind says what an Event of a Watch tells.
type EventKind string

const (
	EventGranted   EventKind = "granted"   // a new lease (a reentry is none)
	EventReleased  EventKind = "released"  // its last hold was released
	EventExpired   EventKind = "expired"   // it was not refreshed in time
	EventBroken    EventKind = "broken"    // a BREAK ended it (BrokenBy)
	EventWithdrawn EventKind = "withdrawn" // a grant Redis never recorded, taken back
	EventValue     EventKind = "value"     // the lease's holder gave it a new Value (Proclaim); Token is the lease's
	EventOverflow  EventKind = "overflow"  // Missed events were lost (the server's or this client's queue was full)
	EventResumed   EventKind = "resumed"   // after a reconnect or fail-over, Name (the pattern) is watched again; what changed meanwhile was not seen
	EventRefused   EventKind = "refused"   // after a reconnect, watching Name (the pattern) was refused: the watch is over
)

// serverKinds are the <what>s of a * WATCH this client knows: another
// (a later server's) is ignored, as PROTOCOL.md asks.
var serverKinds = map[EventKind]bool{EventGranted: true, EventReleased: true, EventExpired: true,
	EventBroken: true, EventWithdrawn: true, EventValue: true}

// Event is news of a watched lock: a lease of Name was granted, released,
// expired, broken or withdrawn, leaving Holders holders, or its holder
// gave it a new value.
type Event struct {
	Kind     EventKind
	Name     string
	Owner    string
	User     string
	Token    uint64
	Holders  int
	BrokenBy string
	Value    string // the lease's value, decoded ("" when none): a granted election's new leader's; EventValue: the new one
	Missed   int    // EventOverflow
}

func ms(v string) time.Duration { return time.Duration(atoi(v)) * time.Millisecond }

func statusOf(name string, r *reply) Status {
	owner, mode := r.kvs("owner"), r.kvs("mode")
	if owner == "-" {
		owner = ""
	}
	if mode == "-" {
		mode = ""
	}
	limit := atoi(r.kvs("limit"))
	if limit == 0 {
		limit = 1
	}
	return Status{
		Name:      name,
		Held:      r.kvs("state") == "held",
		Token:     atou(r.kvs("token")),
		TTL:       ms(r.kvs("ttl_ms")),
		Count:     atoi(r.kvs("count")),
		Owner:     owner,
		User:      r.kvs("user"),
		Waiters:   atoi(r.kvs("waiters")),
		Mode:      mode,
		Limit:     limit,
		Holders:   atoi(r.kvs("holders")),
		HeldFor:   ms(r.kvs("held_ms")),
		Host:      descDecode(r.kvs("host")),
		PID:       atoi(r.kvs("pid")),
		Cmd:       descDecode(r.kvs("cmd")),
		Delay:     ms(r.kvs("delay_ms")),
		DelayLeft: ms(r.kvs("delay_left_ms")),
		Closed:    ms(r.kvs("closed_ms")),
		Value:     descDecode(r.kvs("value")),
	}
}

func holderOf(s string) (Holder, bool) {
	words := strings.Fields(s)
	if len(words) < 2 || (words[0] != "holder" && words[0] != "waiter") {
		return Holder{}, false
	}
	r := &reply{kind: "OK", word: words[0], args: words[2:]}
	h := Holder{
		Owner:    words[1],
		User:     r.kvs("user"),
		Waiter:   words[0] == "waiter",
		Mode:     r.kvs("mode"),
		Token:    atou(r.kvs("token")),
		TTL:      ms(r.kvs("ttl_ms")),
		Count:    atoi(r.kvs("count")),
		Position: atoi(r.kvs("position")),
		HeldFor:  ms(r.kvs("held_ms")),
		Host:     descDecode(r.kvs("host")),
		PID:      atoi(r.kvs("pid")),
		Cmd:      descDecode(r.kvs("cmd")),
		Value:    descDecode(r.kvs("value")),
	}
	if h.Mode == "" {
		h.Mode = "exclusive"
	}
	if w := r.kvs("wait_ms"); w == "inf" {
		h.Wait = -1
	} else {
		h.Wait = ms(w)
	}
	for _, w := range words[2:] {
		if w == "restored" {
			h.Restored = true
		}
	}
	return h, true
}

// busyHolderOf is the holder a NO BUSY names (nil when it names none).
func busyHolderOf(r *reply) *Holder {
	owner, ok := r.kv("owner")
	if !ok {
		return nil
	}
	h := &Holder{
		Owner:   owner,
		User:    r.kvs("user"),
		HeldFor: ms(r.kvs("held_ms")),
		Host:    descDecode(r.kvs("host")),
		PID:     atoi(r.kvs("pid")),
		Cmd:     descDecode(r.kvs("cmd")),
	}
	if len(r.args) > 1 {
		h.TTL = ms(r.args[1])
	}
	return h
}
