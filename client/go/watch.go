// watch.go: Watch, news of locks one does not hold (WATCH/UNWATCH), with
// the watches made again after a reconnect or fail-over.

package dlockd

import (
	"context"
	"strings"
	"sync"
)

// watch is one Watch call: its patterns and its channel.
type watch struct {
	patterns []string
	ch       chan Event
	active   bool // its WATCHes were answered: watch again after a reconnect
	missed   int
	closed   bool
}

func (w *watch) matches(name string) bool {
	for _, p := range w.patterns {
		if patternMatches(p, name) {
			return true
		}
	}
	return false
}

func patternMatches(p, name string) bool {
	if strings.HasSuffix(p, "*") {
		return strings.HasPrefix(name, p[:len(p)-1])
	}
	return p == name
}

// deliver never blocks the manager: a full channel counts the event as
// missed, and an EventOverflow says how many once there is room.
func (w *watch) deliver(ev Event) {
	if w.closed {
		return
	}
	if w.missed > 0 {
		select {
		case w.ch <- Event{Kind: EventOverflow, Missed: w.missed}:
			w.missed = 0
		default:
			w.missed++
			return
		}
	}
	select {
	case w.ch <- ev:
	default:
		w.missed++
	}
}

func (w *watch) close() {
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

func (w *watch) has(p string) bool {
	for _, x := range w.patterns {
		if x == p {
			return true
		}
	}
	return false
}

// Watch asks for news of the locks named (a name, or a prefix followed by
// '*'; "*" alone: every lock): every change of their holders, whoever
// made it, arrives on the channel until ctx ends or the client is closed
// (then the channel is closed). After a reconnect or a fail-over the
// client watches again and sends an EventResumed for each pattern (what
// changed meanwhile was not seen), or EventRefused. A reader too slow for
// the channel (1024 events) misses events, told by an EventOverflow.
//
// Of a partitioned service, a name is watched at its partition's daemon
// and a prefix at the first connection's: it tells of that partition's
// names only. After a reconnect, a name whose partition changed
// meanwhile is refused (EventRefused).
func (c *Client) Watch(ctx context.Context, patterns ...string) (<-chan Event, error) {
	rt := c.rt.Load()
	if rt == nil {
		return c.watch(ctx, patterns...)
	}
	if len(patterns) == 0 {
		return nil, newErr(ErrInvalid, "Watch: no pattern")
	}
	var prefixes, names []string
	for _, p := range patterns {
		if err := checkPattern(p); err != nil {
			return nil, err
		}
		if strings.HasSuffix(p, "*") {
			prefixes = append(prefixes, p)
		} else {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		return c.watch(ctx, prefixes...)
	}
	if len(prefixes) == 0 && len(names) == 1 {
		var ch <-chan Event
		err := c.routed(ctx, names[0], func(x *Client) (err error) {
			ch, err = x.watch(ctx, names[0])
			return err
		})
		return ch, err
	}
	// several daemons: a watch on each, their events on one channel
	wctx, cancel := context.WithCancel(ctx)
	var srcs []<-chan Event
	fail := func(err error) (<-chan Event, error) {
		cancel() // the watches made end
		return nil, err
	}
	if len(prefixes) > 0 {
		ch, err := c.watch(wctx, prefixes...)
		if err != nil {
			return fail(err)
		}
		srcs = append(srcs, ch)
	}
	for _, n := range names {
		var ch <-chan Event
		err := c.routed(wctx, n, func(x *Client) (err error) {
			ch, err = x.watch(wctx, n)
			return err
		})
		if err != nil {
			return fail(err)
		}
		srcs = append(srcs, ch)
	}
	out := make(chan Event, watchQueue)
	var fw sync.WaitGroup
	fw.Add(len(srcs))
	forward := func(src <-chan Event) {
		defer c.wg.Done()
		defer fw.Done()
		for ev := range src {
			select {
			case out <- ev:
			case <-wctx.Done():
				return
			case <-c.quit:
				return
			}
		}
	}
	// counted in c.wg on the manager goroutine (see watch)
	if !c.execAlways(func() {
		c.wg.Add(len(srcs) + 1)
		for _, src := range srcs {
			go forward(src)
		}
		go func() {
			defer c.wg.Done()
			fw.Wait()
			cancel()
			close(out)
		}()
	}) {
		return fail(newErr(ErrClosed, ""))
	}
	return out, nil
}

// watch is Watch on this client's own connection.
func (c *Client) watch(ctx context.Context, patterns ...string) (<-chan Event, error) {
	if len(patterns) == 0 {
		return nil, newErr(ErrInvalid, "Watch: no pattern")
	}
	for _, p := range patterns {
		if err := checkPattern(p); err != nil {
			return nil, err
		}
	}
	w := &watch{patterns: append([]string(nil), patterns...), ch: make(chan Event, watchQueue)}
	var qs []*req
	if err := c.exec(ctx, func() {
		now := nowMs()
		c.watches = append(c.watches, w)
		for _, p := range patterns {
			q := &req{op: "WATCH", name: p, watch: w, done: make(chan struct{})}
			c.setReqDeadline(q, now+c.serverTimeoutMs())
			qs = append(qs, q)
			c.submit(q, now)
		}
	}); err != nil {
		return nil, err
	}
	var ferr error
	for _, q := range qs {
		select {
		case <-q.done:
			if q.err != nil && ferr == nil {
				ferr = q.err
			}
		case <-ctx.Done():
			if ferr == nil {
				ferr = ctx.Err()
			}
			c.execAlways(func() { c.abandon(q, ctx.Err()) })
		case <-c.quit:
			if ferr == nil {
				ferr = newErr(ErrClosed, "")
			}
		}
	}
	if ferr != nil {
		c.execAlways(func() { c.unwatch(w) })
		return nil, ferr
	}
	// The goroutine that ends the watch with ctx is counted in c.wg on
	// the manager goroutine, which is itself counted until Close's Wait
	// can return: the Add never races with that Wait.
	if !c.execAlways(func() {
		w.active = true
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			select {
			case <-ctx.Done():
				c.execAlways(func() { c.unwatch(w) })
			case <-c.quit:
			}
		}()
	}) {
		return nil, newErr(ErrClosed, "")
	}
	return w.ch, nil
}

// unwatch ends w: UNWATCH what no other watch watches, close its channel.
func (c *Client) unwatch(w *watch) {
	for i, x := range c.watches {
		if x == w {
			c.watches = append(c.watches[:i], c.watches[i+1:]...)
			break
		}
	}
	for _, p := range w.patterns {
		still := false
		for _, o := range c.watches {
			still = still || o.has(p)
		}
		if !still && c.state == stUp && c.sessionOK {
			c.internal("UNWATCH", p, 0, false)
		}
	}
	w.close()
}

// rewatch: after a reconnect, watch again what the active watches watch.
func (c *Client) rewatch() {
	seen := map[string]bool{}
	for _, w := range c.watches {
		if !w.active {
			continue
		}
		for _, p := range w.patterns {
			if !seen[p] {
				seen[p] = true
				c.internal("REWATCH", p, 0, false)
			}
		}
	}
}

func (c *Client) rWatch(q *req, r *reply) bool {
	ok := r.kind == "OK" && r.word == "WATCHING"
	if q.op == "WATCH" {
		if !ok {
			return false // the error ends the call
		}
		c.finish(q, nil, nil)
		return true
	}
	// REWATCH
	for _, w := range append([]*watch(nil), c.watches...) {
		if !w.active || !w.has(q.name) {
			continue
		}
		if ok {
			w.deliver(Event{Kind: EventResumed, Name: q.name})
			continue
		}
		w.deliver(Event{Kind: EventRefused, Name: q.name})
		var rest []string
		for _, p := range w.patterns {
			if p != q.name {
				rest = append(rest, p)
			}
		}
		w.patterns = rest
		if len(rest) == 0 {
			c.unwatch(w)
		}
	}
	c.finish(q, nil, nil)
	return true
}
