// SPDX-License-Identifier: MIT
//
// goworker: a lock worker of the fault campaign, on the Go client.
//
//	goworker lock <hist> <host> <port> <owner> <locks> <seed> <ms>
//
// The twin of worker.c's "worker lock" and pyworker.py (same arguments,
// same history records, judged by the same checker, check.c): for <ms> or
// until SIGTERM it takes random locks through dlockd.Client, with random
// TTLs, waits and hold times (some longer than the TTL, so the client
// renews), refreshes some with another TTL (shorter or longer: the client
// then counts on the shorter deadline from the send), and leaves some
// held as "dlock lock" does (the client is closed without releasing; the
// worker goes on as a new owner with a history file of its own). <locks>
// is "<l>[:<s>:<p>]": exclusive locks L0.., read/write locks S0.. (shared
// two times in three), semaphores P0.. of permits.
//
// Records, one write(2) each on an O_APPEND descriptor, before the worker
// acts on what they say, times in ms on CLOCK_BOOTTIME (the clock of the
// client's local deadlines):
//
//	G lock token deadline mode   a grant received (x, s or p<n>)
//	R lock token deadline        the client's deadline moved (a renewal
//	                             or a refresh)
//	U lock token                 about to release: no longer holding
//	L lock token reason deadline the client says the lease is lost
//	                             (1 expired, 2 rejected, 3 unconfirmed)
//	E lock rc                    a lock that did not grant (rc: as
//	                             libdlock's DLOCK_E* codes)
//
// The Go client tells a lease's local deadline as Remaining(), counted
// from its own reading of the clock; the worker adds it to a reading
// taken after, so the deadline it records is never earlier than the
// client's (by the microseconds between the two readings).
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"dlockd"
)

const permits = 2 // the limit of the semaphores P0..: every worker asks the same

// moved: a deadline read again that differs by more than this moved (a
// renewal moves it by a third of the TTL at least; two readings of an
// unchanged one differ by microseconds).
const moved = 3

var (
	histMu  sync.Mutex
	hist    *os.File // histMu: a loss is recorded from a goroutine of its own
	stopped atomic.Bool
)

func nowMs() int64 {
	var ts syscall.Timespec
	// CLOCK_BOOTTIME (7), as the client's clock
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 7, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return ts.Sec*1000 + ts.Nsec/1e6
}

func record(format string, a ...interface{}) {
	histMu.Lock()
	defer histMu.Unlock()
	line := fmt.Sprintf("%d %s\n", nowMs(), fmt.Sprintf(format, a...))
	if _, err := hist.Write([]byte(line)); err != nil {
		fmt.Fprintln(os.Stderr, "goworker: history:", err)
		os.Exit(2)
	}
}

// deadline: the lease's local deadline on CLOCK_BOOTTIME, in ms (0 once
// the client no longer counts it held).
func deadline(l *dlockd.Lease) int64 {
	rem := l.Remaining()
	if rem <= 0 {
		return 0
	}
	return nowMs() + int64((rem+time.Millisecond-1)/time.Millisecond)
}

func rcOf(err error) int {
	for _, k := range []struct {
		kind error
		rc   int
	}{
		{dlockd.ErrBusy, -1}, {dlockd.ErrTimeout, -2}, {dlockd.ErrConnectionLost, -7},
		{dlockd.ErrUnavailable, -9}, {dlockd.ErrLimit, -10}, {dlockd.ErrLimitMismatch, -16},
		{dlockd.ErrUpgradeDeadlock, -17}, {dlockd.ErrDenied, -19},
	} {
		if errors.Is(err, k.kind) {
			return k.rc
		}
	}
	return -14
}

type worker struct {
	ctx              context.Context
	histBase         string
	ownerBase, owner string
	n                int
	nl, ns, np       int
	servers          string
	end              int64
	rnd              *rand.Rand
	c                *dlockd.Client
}

func (w *worker) connect() {
	for !stopped.Load() {
		c, err := dlockd.Dial(w.ctx, w.servers, dlockd.Owner(w.owner),
			dlockd.ServerTimeout(3*time.Second))
		if err == nil {
			w.c = c
			return
		}
		record("E - %d", rcOf(err))
		time.Sleep(200 * time.Millisecond)
	}
}

// nextOwner: a lease left held; go on as another owner, in another file.
func (w *worker) nextOwner() {
	w.n++
	w.owner = fmt.Sprintf("%s~%d", w.ownerBase, w.n)
	f, err := os.OpenFile(fmt.Sprintf("%s~%d.hist", w.histBase, w.n),
		os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(2)
	}
	histMu.Lock()
	hist.Close()
	hist = f
	histMu.Unlock()
}

// held is a lease the worker holds, with the deadline it last recorded.
type held struct {
	l    *dlockd.Lease
	seen atomic.Int64
	end  chan struct{} // closed once released: the loss watch ends
	gone chan struct{} // closed when the loss watch has ended
}

// watchLoss records the lease's loss (L) the moment the client reports
// it, as pyworker's on_lost does; a lease the worker closed its client
// on (left held) is no loss.
func watchLoss(h *held) {
	defer close(h.gone)
	select {
	case <-h.l.Done():
	case <-h.end:
		return
	}
	reason := 3
	var e *dlockd.Error
	if errors.As(h.l.Err(), &e) {
		switch e.Reason {
		case dlockd.LostClosed:
			return
		case dlockd.LostExpired:
			reason = 1
		case dlockd.LostRejected:
			reason = 2
		}
	}
	record("L %s %d %d %d", h.l.Name(), h.l.Token(), reason, h.seen.Load())
}

// note records a move of the deadline (R).
func (h *held) note() {
	if d, seen := deadline(h.l), h.seen.Load(); d != 0 && (d > seen+moved || d < seen-moved) {
		record("R %s %d %d", h.l.Name(), h.l.Token(), d)
		h.seen.Store(d)
	}
}

// hold holds about ms, noting each move of the deadline; true if still
// valid at the end.
func hold(h *held, ms int64) bool {
	end := nowMs() + ms
	for !stopped.Load() && nowMs() < end {
		// the deadline first, also of a lease that just ended (worker.c)
		h.note()
		if !h.l.Valid() {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h.l.Valid()
}

func (w *worker) oneLock() {
	ttls := []time.Duration{300, 800, 2000}
	ttl := ttls[w.rnd.Intn(len(ttls))] * time.Millisecond
	opts := []dlockd.LockOption{dlockd.TTL(ttl)}
	switch w.rnd.Intn(4) {
	case 0:
		opts = append(opts, dlockd.Wait(0))
	case 1:
		opts = append(opts, dlockd.Wait(500*time.Millisecond))
	case 2:
		opts = append(opts, dlockd.Wait(3*time.Second))
	} // 3: until granted or stopped
	k := w.rnd.Intn(w.nl + w.ns + w.np)
	var name, mode string
	switch {
	case k < w.nl:
		name, mode = fmt.Sprintf("L%d", k), "x"
	case k < w.nl+w.ns:
		name, mode = fmt.Sprintf("S%d", k-w.nl), "x"
		if w.rnd.Intn(3) != 0 {
			opts = append(opts, dlockd.Shared())
			mode = "s"
		}
	default:
		name, mode = fmt.Sprintf("P%d", k-w.nl-w.ns), fmt.Sprintf("p%d", permits)
		opts = append(opts, dlockd.Limit(permits))
	}
	l, err := w.c.Lock(w.ctx, name, opts...)
	if err != nil {
		record("E %s %d", name, rcOf(err))
		if !errors.Is(err, dlockd.ErrTimeout) && !errors.Is(err, dlockd.ErrBusy) {
			time.Sleep(50 * time.Millisecond) // the server is away: do not spin
		}
		return
	}
	h := &held{l: l, end: make(chan struct{}), gone: make(chan struct{})}
	h.seen.Store(deadline(l))
	record("G %s %d %d %s", name, l.Token(), h.seen.Load(), mode)
	go watchLoss(h)
	defer func() { close(h.end); <-h.gone }()
	changed := false
	if w.rnd.Intn(4) == 0 {
		newTTLs := []time.Duration{20, 150, 300, 800, 2000, 3000}
		nt := newTTLs[w.rnd.Intn(len(newTTLs))] * time.Millisecond
		// recorded before it is sent: a refresh that shortens the lease
		// ends it from the server's receipt (worker.c)
		if short := nowMs() + int64(nt/time.Millisecond); short < h.seen.Load() {
			record("R %s %d %d", name, l.Token(), short)
			h.seen.Store(short)
		}
		_ = l.Refresh(w.ctx, nt)
		changed = true
		// also when no longer valid: a refresh to 20 ms may have ended it
		// already (worker.c, change_ttl)
		h.note()
	}
	if k < w.nl && changed && w.rnd.Intn(3) == 0 {
		// leave it held, as "dlock lock" does: nobody renews it, and its
		// interval lasts until the deadline it was told
		w.c.Close()
		w.c = nil
		w.nextOwner()
		w.connect()
		return
	}
	holdMs := int64(ttl/time.Millisecond) * int64([]int{0, 1, 2, 6}[w.rnd.Intn(4)]) / 4
	// U before the release, held to the end or not: a lease no longer
	// valid is given back too, and its L record, written by the loss
	// watch, may come after the release let the next holder in (worker.c)
	hold(h, holdMs)
	record("U %s %d", name, l.Token())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = l.Unlock(ctx)
	cancel()
}

func main() {
	if len(os.Args) != 9 || os.Args[1] != "lock" {
		fmt.Fprintln(os.Stderr, "usage: goworker lock <hist> <host> <port> <owner> <locks> <seed> <ms>")
		os.Exit(64)
	}
	a := os.Args[2:]
	ms, _ := strconv.ParseInt(a[6], 10, 64)
	seed, _ := strconv.ParseInt(a[5], 10, 64)
	var err error
	hist, err = os.OpenFile(a[0], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		stopped.Store(true)
		cancel()
	}()
	// past the run and a grace, a worker still blocked (a wait forever on
	// a lock closed for max_ttl) ends, leaving its history true (worker.c)
	time.AfterFunc(time.Duration(ms+30000)*time.Millisecond, func() { os.Exit(0) })

	w := &worker{ctx: ctx, histBase: strings.TrimSuffix(a[0], ".hist"), ownerBase: a[3], owner: a[3],
		servers: a[1], end: nowMs() + ms, rnd: rand.New(rand.NewSource(seed))}
	if !strings.Contains(a[1], ":") {
		w.servers = a[1] + ":" + a[2]
	}
	var locks [3]int
	for i, p := range strings.SplitN(a[4], ":", 3) {
		locks[i], _ = strconv.Atoi(p)
	}
	w.nl, w.ns, w.np = locks[0], locks[1], locks[2]
	w.connect()
	for !stopped.Load() && w.c != nil && nowMs() < w.end {
		w.oneLock()
	}
	if w.c != nil {
		w.c.Close()
	}
}
