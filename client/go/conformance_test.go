// conformance_test.go: the Go client's runner of the conformance
// scenarios (tests/conformance/scenarios.txt, which says the language);
// libdlock (tests/test_conformance.c) and the Python client
// (tests/python/test_conformance.py) run the same file. One subtest per
// scenario, each on a daemon of its own; a step whose outcome differs
// fails with the scenario's name, its line and what was seen.
//
// With DL_CONFORMANCE_PARTS=1 every scenario runs on a partitioned service
// instead, as libdlock's runner does (tests/test_conformance.c): a
// redis-server and three daemons of partitions p0, p1 and p2, the map
// giving p0 the slots below 5461, p1 those below 10923, p2 the rest. The
// clients know p0's daemon only, and every name of a scenario is put
// under one tag whose slot is p1's (even index) or p2's (odd index): each
// call goes through the map and NO MOVED, and a multi-lock's names share
// the tag. "daemon none" starts the same service (partitions need Redis);
// "daemon kill9", "restart", "pause" and "resume" act on every daemon.

package dlockd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	statusPoll = 2 * time.Second  // a status step is polled this long
	stepMax    = 30 * time.Second // no step of a scenario waits longer
)

type scenario struct {
	name  string
	lines []scenLine
}

type scenLine struct {
	no   int
	text string
}

func scenarioFile() string {
	if p := os.Getenv("DL_CONFORMANCE"); p != "" {
		return p
	}
	return "../../tests/conformance/scenarios.txt"
}

func readScenarios(t *testing.T) []scenario {
	f, err := os.Open(scenarioFile())
	if err != nil {
		t.Fatalf("the scenarios: %v (set DL_CONFORMANCE)", err)
	}
	defer f.Close()
	var out []scenario
	s := bufio.NewScanner(f)
	for no := 1; s.Scan(); no++ {
		text := strings.TrimSpace(s.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if strings.HasPrefix(text, "scenario ") {
			out = append(out, scenario{name: strings.Fields(text)[1]})
		}
		if len(out) == 0 {
			t.Fatalf("line %d: a step before the first scenario", no)
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, scenLine{no, text})
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no scenario in " + scenarioFile())
	}
	return out
}

// partsMode: DL_CONFORMANCE_PARTS=1, the scenarios on a partitioned service.
func partsMode() bool { return os.Getenv("DL_CONFORMANCE_PARTS") == "1" }

func TestConformance(t *testing.T) {
	for i, sc := range readScenarios(t) {
		i, sc := i, sc
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel() // each on a daemon (or service) of its own
			r := &run{t: t, name: sc.name, index: i, parts: partsMode(), clients: map[string]*scenClient{},
				leases: map[string]*Lease{}, jobs: map[string]*job{}, lost: map[*Lease]lossSeen{},
				told: map[*Lease]int{}, stop: make(chan struct{})}
			defer r.close()
			for _, l := range sc.lines {
				r.no = l.no
				r.line(l.text)
			}
		})
	}
}

type scenClient struct {
	c     *Client
	renew bool
}

type job struct {
	done   chan struct{}
	all    bool     // lockall: leases, bound in byte order of the names
	lease  *Lease   // lock
	leases []*Lease // lockall
	err    error
}

// lossSeen: when Done was closed, and the lease's local deadline then.
type lossSeen struct {
	at, deadline float64
	err          error
}

type run struct {
	t       *testing.T
	name    string
	index   int // the scenario's, in the file
	no      int
	redis   *proc
	d       *proc // the daemon the clients know (p0's with parts)
	dargs   []string
	dport   int
	parts   bool       // DL_CONFORMANCE_PARTS: on a partitioned service
	pd      []*proc    // with parts: p0's, p1's and p2's daemons
	pports  []int      // and their ports
	pargs   [][]string // and their other arguments
	tag     string     // with parts: "{c<k>}", before every name
	clients map[string]*scenClient
	leases  map[string]*Lease
	jobs    map[string]*job
	mu      sync.Mutex
	lost    map[*Lease]lossSeen
	told    map[*Lease]int // what OnContended said last, by lease: it may come before the scenario names the lease
	watched sync.WaitGroup
	stop    chan struct{}
}

func (r *run) fail(format string, a ...interface{}) {
	r.t.Helper()
	r.t.Fatalf("%s, line %d: %s", r.name, r.no, fmt.Sprintf(format, a...))
}

func (r *run) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), stepMax)
	r.t.Cleanup(cancel)
	return ctx
}

func opts(words []string) map[string]string {
	m := map[string]string{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

func scenMs(s string) time.Duration {
	n, _ := strconv.Atoi(s)
	return time.Duration(n) * time.Millisecond
}

// ---- steps -----------------------------------------------------------------

func (r *run) daemon(what string) {
	if r.parts {
		r.partsDaemon(what)
		return
	}
	switch what {
	case "none", "redis":
		r.dport = freePort(r.t)
		r.dargs = []string{"--persist", "none"}
		if what == "redis" {
			r.redis = startRedisAlways(r.t)
			r.dargs = []string{"--persist", "redis", "--redis", fmt.Sprintf("redis://127.0.0.1:%d/0", r.redis.port)}
		}
		r.startDaemon()
	case "kill9":
		r.d.kill()
	case "restart":
		r.d.kill()
		r.startDaemon()
	case "pause":
		r.d.signal(syscall.SIGSTOP)
	case "resume":
		r.d.signal(syscall.SIGCONT)
	default:
		r.fail("unknown daemon step %s", what)
	}
}

func (r *run) startDaemon() {
	args := append([]string{"--port", fmt.Sprint(r.dport), "-l", "info"}, r.dargs...)
	r.d = start(r.t, "dlockd", dlockdBin(r.t), r.dport, args...)
	r.d.waitListening(20 * time.Second)
}

// startRedisAlways: a private redis-server, AOF with appendfsync always
// (the scenarios' "daemon redis").
func startRedisAlways(t *testing.T) *proc {
	t.Helper()
	port := freePort(t)
	p := start(t, "redis", "redis-server", port, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--maxmemory-policy", "noeviction", "--dir", t.TempDir())
	p.waitListening(20 * time.Second)
	return p
}

// ---- the partitioned service (DL_CONFORMANCE_PARTS) --------------------------

const (
	confParts = 3           // p0, p1, p2
	p1First   = 5461        // p0 keeps the slots below
	p2First   = 10923       // p1 gets those from p1First below this, p2 the rest
	partsWait = time.Minute // the service's setup waits no longer
)

func (r *run) partsDaemon(what string) {
	switch what {
	case "none", "redis":
		r.partsStart()
	case "kill9":
		for _, p := range r.pd {
			p.kill()
		}
	case "restart":
		for _, p := range r.pd {
			p.kill()
		}
		r.partsSpawn()
	case "pause":
		for _, p := range r.pd {
			p.signal(syscall.SIGSTOP)
		}
	case "resume":
		for _, p := range r.pd {
			p.signal(syscall.SIGCONT)
		}
	default:
		r.fail("unknown daemon step %s", what)
	}
}

// partsSpawn starts every daemon of the service with its arguments (the
// same ports again on a restart) and waits until each listens.
func (r *run) partsSpawn() {
	bin := dlockdBin(r.t)
	r.pd = make([]*proc, len(r.pargs))
	for i, args := range r.pargs {
		port := r.pports[i]
		args = append([]string{"--port", fmt.Sprint(port)}, args...)
		r.pd[i] = start(r.t, fmt.Sprintf("dlockd-p%d", i), bin, port, args...)
	}
	for _, p := range r.pd {
		p.waitListening(20 * time.Second)
	}
	r.d = r.pd[0]
}

// partsStart: a redis-server, the daemons of p0, p1 and p2 on it, the map
// made on p0, the scenario's tag on p1 (even index) or p2 (odd), and
// every daemon serving from that map.
func (r *run) partsStart() {
	t := r.t
	r.redis = startRedisAlways(t)
	r.pports, r.pargs = nil, nil
	for i := 0; i < confParts; i++ {
		conf := filepath.Join(t.TempDir(), "dlockd.conf")
		text := fmt.Sprintf("[persistence]\nredis_prefix = c:\n[partition]\nid = p%d\n", i)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		r.pports = append(r.pports, freePort(t))
		r.pargs = append(r.pargs, []string{"-l", "info", "-c", conf,
			"--persist", "redis", "--redis", fmt.Sprintf("redis://127.0.0.1:%d/0", r.redis.port)})
	}
	r.partsSpawn()
	p0 := r.pd[0].addr
	if e := partitionCmd(t, p0, "PARTITION INIT", ""); e != 1 {
		r.fail("PARTITION INIT: epoch %d, expected 1", e)
	}
	moves := []string{"", fmt.Sprintf("%d-%d", p1First, p2First-1), fmt.Sprintf("%d-%d", p2First, slotCount-1)}
	for i := 1; i < confParts; i++ {
		waitMap(t, p0, 1, fmt.Sprintf("part p%d ", i)) // its daemon adds it within a second
		partitionCmd(t, p0, fmt.Sprintf("PARTITION MOVE %s p%d", moves[i], i), fmt.Sprintf("p%d", i))
	}
	target, lo, hi := 1, p1First, p2First-1
	if r.index%2 == 1 {
		target, lo, hi = 2, p2First, slotCount-1
	}
	k := 0
	for s := slotOf("c0"); s < lo || s > hi; s = slotOf(fmt.Sprintf("c%d", k)) {
		k++
	}
	r.tag = fmt.Sprintf("{c%d}", k)
	// each daemon reads the map every second: until each serves from it
	for i, p := range r.pd {
		want := "NO MOVED"
		if i == target {
			want = "OK STATUS"
		}
		var last string
		for end := time.Now().Add(partsWait); ; time.Sleep(20 * time.Millisecond) {
			if last = statusAt(t, p.addr, r.tag+"probe"); strings.HasPrefix(last, want) {
				break
			}
			if time.Now().After(end) {
				r.fail("p%d: STATUS %sprobe: %q, expected %s", i, r.tag, last, want)
			}
		}
	}
}

// tagNames puts the scenario's names under the tag: <c>
// lock|lockall|status|check|break <name>, <c> spawn <job> lock|lockall
// <name> (each name of a lockall's list).
func (r *run) tagNames(words []string) {
	at := 0
	switch {
	case len(words) >= 5 && words[1] == "spawn":
		at = 4
	case len(words) >= 3:
		switch words[1] {
		case "lock", "lockall", "status", "check", "break":
			at = 2
		}
	}
	if at == 0 {
		return
	}
	names := strings.Split(words[at], ",")
	for i := range names {
		names[i] = r.tag + names[i]
	}
	words[at] = strings.Join(names, ",")
}

func (r *run) client(words []string) {
	o := opts(words[2:])
	var co []Option
	if v, ok := o["owner"]; ok {
		co = append(co, Owner(v))
	}
	if v, ok := o["key"]; ok {
		co = append(co, OwnerKey(v))
	}
	co = append(co, ConnectTimeout(10*time.Second), ServerTimeout(10*time.Second), OnContended(r.onContended))
	c, err := Dial(r.ctx(), r.d.addr, co...)
	if o["expect"] == "denied" {
		if err == nil {
			c.Close()
			r.fail("connect: accepted, expected denied")
		}
		if !errors.Is(err, ErrDenied) {
			r.fail("connect: %v, expected denied", err)
		}
		return
	}
	if err != nil {
		r.fail("connect: %v", err)
	}
	r.clients[words[1]] = &scenClient{c: c, renew: o["renew"] != "0"}
}

func (r *run) lockOpts(sc *scenClient, words []string) (string, []LockOption) {
	o := opts(words[1:])
	var lo []LockOption
	if v, ok := o["ttl"]; ok {
		lo = append(lo, TTL(scenMs(v)))
	}
	if v, ok := o["wait"]; ok && v != "inf" {
		lo = append(lo, Wait(scenMs(v)))
	}
	if o["mode"] == "shared" {
		lo = append(lo, Shared())
	}
	if v, ok := o["limit"]; ok {
		n, _ := strconv.Atoi(v)
		lo = append(lo, Limit(n))
	}
	if o["notify"] == "waiters" {
		lo = append(lo, NotifyWaiters())
	}
	if v, ok := o["value"]; ok {
		lo = append(lo, Value(v))
	}
	if !sc.renew {
		lo = append(lo, NoRenew())
	}
	return words[0], lo
}

func lockWord(err error) string {
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, ErrDeadlock):
		return "cycle"
	case errors.Is(err, ErrHeldByOwner):
		return "heldbyowner"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrLimitMismatch):
		return "mismatch"
	case errors.Is(err, ErrUpgradeDeadlock):
		return "deadlock"
	case errors.Is(err, ErrDenied):
		return "denied"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return err.Error()
}

// granted notes a lease and watches for its loss as on_lost would.
func (r *run) granted(v string, l *Lease) {
	r.leases[v] = l
	r.watched.Add(1)
	go func() {
		defer r.watched.Done()
		select {
		case <-l.Done(): // a loss, or Close of a lease still held
		case <-r.stop: // the end (Unlock does not close Done)
			return
		}
		at := nowMs()
		l.mu.Lock()
		d := l.deadline
		l.mu.Unlock()
		r.mu.Lock()
		r.lost[l] = lossSeen{at: at, deadline: d, err: l.Err()}
		r.mu.Unlock()
	}()
}

func (r *run) lockOutcome(l *Lease, err error, want []string) {
	got := lockWord(err)
	if len(want) == 0 || got != want[0] {
		r.fail("lock: %s (%v), expected %v", got, err, want)
	}
	if l != nil {
		if len(want) < 2 {
			r.fail("lock: granted, and no lease variable to name it")
		}
		r.granted(want[1], l)
	}
	if errors.Is(err, ErrDeadlock) {
		var e *Error
		if !errors.As(err, &e) || len(want) < 2 || strconv.Itoa(e.Owners) != want[1] {
			r.fail("cycle: %v, expected %v owners", err, want[1:])
		}
	}
}

// lockAllOpts: <name>,<name>,... [ttl=<ms>] [wait=<ms>|inf]
func (r *run) lockAllOpts(sc *scenClient, words []string) ([]string, []LockOption) {
	name, lo := r.lockOpts(sc, words)
	return strings.Split(name, ","), lo
}

// lockAllOutcome: all <L1> <L2> ... binds the leases in byte order of
// their names (LockAll returns them in the order asked).
func (r *run) lockAllOutcome(ls []*Lease, err error, want []string) {
	if err != nil {
		r.lockOutcome(nil, err, want)
		return
	}
	if len(want) == 0 || want[0] != "all" {
		r.fail("lockall: all %d granted, expected %v", len(ls), want)
	}
	sorted := append([]*Lease(nil), ls...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name() < sorted[j].Name() })
	if len(want)-1 != len(sorted) {
		r.fail("lockall: %d leases, expected %v", len(sorted), want)
	}
	for i, l := range sorted {
		r.granted(want[i+1], l)
	}
}

func (r *run) lease(v string) *Lease {
	l, ok := r.leases[v]
	if !ok {
		r.fail("no lease %s", v)
	}
	return l
}

func (r *run) verb(sc *scenClient, words, want []string) {
	c := sc.c
	expect := func(what, got string) {
		if len(want) == 0 || got != want[0] {
			r.fail("%s: %s, expected %v", what, got, want)
		}
	}
	switch words[1] {
	case "lock":
		name, lo := r.lockOpts(sc, words[2:])
		l, err := c.Lock(r.ctx(), name, lo...)
		r.lockOutcome(l, err, want)
	case "lockall":
		names, lo := r.lockAllOpts(sc, words[2:])
		ls, err := c.LockAll(r.ctx(), names, lo...)
		r.lockAllOutcome(ls, err, want)
	case "spawn": // <c> spawn <job> lock <name> ... | lockall <names> ...
		if len(words) < 5 {
			r.fail("spawn: <job> lock|lockall <name> ...")
		}
		j := &job{done: make(chan struct{}), all: words[3] == "lockall"}
		ctx := r.ctx()
		if j.all {
			names, lo := r.lockAllOpts(sc, words[4:])
			go func() {
				defer close(j.done)
				j.leases, j.err = c.LockAll(ctx, names, lo...)
			}()
		} else {
			name, lo := r.lockOpts(sc, words[4:])
			go func() {
				defer close(j.done)
				j.lease, j.err = c.Lock(ctx, name, lo...)
			}()
		}
		r.jobs[words[2]] = j
	case "release":
		got := "ok"
		if err := r.lease(words[2]).Unlock(r.ctx()); errors.Is(err, ErrNotHolder) {
			got = "notholder"
		} else if err != nil {
			got = err.Error()
		}
		expect("release", got)
	case "refresh":
		o := opts(words[3:])
		got := "ok"
		if err := r.lease(words[2]).Refresh(r.ctx(), scenMs(o["ttl"])); errors.Is(err, ErrLost) {
			got = "lost"
		} else if err != nil {
			got = err.Error()
		}
		expect("refresh", got)
	case "proclaim": // <c> proclaim <L> <word>: a leader's new value
		if len(words) < 4 {
			r.fail("proclaim: no value")
		}
		got := "ok"
		if err := r.lease(words[2]).Proclaim(r.ctx(), words[3]); errors.Is(err, ErrLost) || errors.Is(err, ErrNotHolder) {
			got = "lost"
		} else if err != nil {
			got = err.Error()
		}
		expect("proclaim", got)
	case "check", "break":
		tok := r.lease(words[3]).Token()
		got := map[string]string{"check": "valid", "break": "ok"}[words[1]]
		var err error
		if words[1] == "check" {
			err = c.Check(r.ctx(), words[2], tok)
		} else {
			err = c.Break(r.ctx(), words[2], tok, "conformance")
		}
		if errors.Is(err, ErrLost) {
			got = "stale"
		} else if err != nil {
			got = err.Error()
		}
		expect(words[1], got)
	case "status":
		end := time.Now().Add(statusPoll)
		for {
			st, err := c.Status(r.ctx(), words[2])
			if err != nil {
				r.fail("status: %v", err)
			}
			if r.statusMatches(st, want) {
				break
			}
			if time.Now().After(end) {
				r.fail("status: %+v, expected %v", st, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	default:
		r.fail("unknown verb %s", words[1])
	}
}

func (r *run) statusMatches(st Status, want []string) bool {
	if len(want) == 0 || want[0] != map[bool]string{true: "held", false: "free"}[st.Held] {
		return false
	}
	for _, w := range want[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			if st.Token != r.lease(w).Token() {
				return false
			}
			continue
		}
		var got string
		switch k {
		case "waiters":
			got = strconv.Itoa(st.Waiters)
		case "holders":
			got = strconv.Itoa(st.Holders)
		case "mode":
			got = st.Mode
		case "limit":
			got = strconv.Itoa(st.Limit)
		case "value":
			got = st.Value
		default:
			r.fail("status: unknown field %s", k)
		}
		if got != v {
			return false
		}
	}
	return true
}

// lostStep: lost <L> within <ms> [reason=...]: Done was closed, with that
// reason, before the lease's local deadline.
func (r *run) lostStep(words []string) {
	l := r.lease(words[1])
	within := time.Duration(0)
	if len(words) > 3 && words[2] == "within" {
		within = scenMs(words[3])
	}
	select {
	case <-l.Done():
	case <-time.After(within):
		r.fail("%s not lost within %v", words[1], within)
	}
	var seen lossSeen
	for end := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		s, ok := r.lost[l]
		r.mu.Unlock()
		if ok {
			seen = s
			break
		}
		if time.Now().After(end) {
			r.fail("%s: Done closed, its loss not seen", words[1])
		}
	}
	var e *Error
	if !errors.As(seen.err, &e) || !errors.Is(seen.err, ErrLost) {
		r.fail("%s: Done closed with %v, not a loss", words[1], seen.err)
	}
	if want, ok := opts(words[2:])["reason"]; ok {
		got := map[LostReason]string{LostExpired: "expired", LostRejected: "rejected",
			LostUnconfirmed: "unconfirmed"}[e.Reason]
		if got != want {
			r.fail("%s lost with reason %v, expected %s", words[1], e.Reason, want)
		}
	}
	if seen.at >= seen.deadline {
		r.fail("%s: lost at %.0f ms, not before its deadline %.0f", words[1], seen.at, seen.deadline)
	}
}

func (r *run) onContended(l *Lease, waiters int) {
	r.mu.Lock()
	r.told[l] = waiters
	r.mu.Unlock()
}

func (r *run) toldOf(l *Lease) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.told[l]
}

// contendedStep: contended <L> <n> within <ms>: OnContended said n for
// L, and the lease says so too.
func (r *run) contendedStep(words []string) {
	l := r.lease(words[1])
	want, _ := strconv.Atoi(words[2])
	within := time.Duration(0)
	if len(words) > 4 && words[3] == "within" {
		within = scenMs(words[4])
	}
	for end := time.Now().Add(within); r.toldOf(l) != want && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.toldOf(l); got != want {
		r.fail("%s: OnContended said %d, expected %d within %v", words[1], got, want, within)
	}
	if got := l.Waiters(); got != want {
		r.fail("%s: Waiters() %d, expected %d", words[1], got, want)
	}
}

func (r *run) line(text string) {
	left, right, _ := strings.Cut(text, " -> ")
	words, want := strings.Fields(left), strings.Fields(right)
	if r.tag != "" {
		r.tagNames(words)
	}
	switch head := words[0]; head {
	case "scenario":
	case "daemon":
		r.daemon(words[1])
	case "client":
		r.client(words)
	case "sleep":
		time.Sleep(scenMs(words[1]))
	case "valid":
		if !r.lease(words[1]).Valid() {
			r.fail("%s is not valid", words[1])
		}
	case "lost":
		r.lostStep(words)
	case "contended":
		r.contendedStep(words)
	case "order":
		if !(r.lease(words[1]).Token() < r.lease(words[3]).Token()) {
			r.fail("%s's token is not below %s's", words[1], words[3])
		}
	case "join":
		j, ok := r.jobs[words[1]]
		if !ok {
			r.fail("no job %s", words[1])
		}
		select {
		case <-j.done:
		case <-time.After(stepMax):
			r.fail("job %s still waits", words[1])
		}
		if j.all {
			r.lockAllOutcome(j.leases, j.err, want)
		} else {
			r.lockOutcome(j.lease, j.err, want)
		}
	default:
		sc, ok := r.clients[head]
		if !ok {
			r.fail("no client or step %s", head)
		}
		r.verb(sc, words, want)
	}
}

func (r *run) close() {
	if r.d != nil {
		r.d.signal(syscall.SIGCONT) // a paused daemon lets its clients go
	}
	for _, p := range r.pd {
		p.signal(syscall.SIGCONT)
	}
	for _, sc := range r.clients {
		sc.c.Close()
	}
	for _, j := range r.jobs {
		<-j.done // the clients' Close ended every call
	}
	close(r.stop)
	r.watched.Wait()
}
