// SPDX-License-Identifier: MIT
//
// gobench: the Go client's driver of "make bench-clients"
// (tests/bench/clients.py), the twin of clientbench.c:
//
//	gobench pairs|handoff <servers> <clients> <seconds>
//
// pairs: each client (a goroutine with a dlockd.Client of its own: one
// connection, one owner) takes and releases a lock of its own name, wait
// 0, one after the other. handoff: every client takes ONE lock, waiting
// for it, releases it at once and asks again; the wait of each
// acquisition is kept. Prints one JSON line: {"ops", "secs", "errors",
// "waits_ms"}. The TTL (10 s) outlives a run: nothing expires.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"dlockd"
)

const ttl = 10 * time.Second

type result struct {
	Ops    int64     `json:"ops"`
	Secs   float64   `json:"secs"`
	Errors int64     `json:"errors"`
	Waits  []float64 `json:"waits_ms"`
}

func main() {
	if len(os.Args) != 5 || (os.Args[1] != "pairs" && os.Args[1] != "handoff") {
		fmt.Fprintln(os.Stderr, "usage: gobench pairs|handoff <servers> <clients> <seconds>")
		os.Exit(64)
	}
	handoff := os.Args[1] == "handoff"
	n, _ := strconv.Atoi(os.Args[3])
	secs, _ := strconv.ParseFloat(os.Args[4], 64)
	if n < 1 || n > 256 {
		fmt.Fprintln(os.Stderr, "gobench: 1 to 256 clients")
		os.Exit(64)
	}
	ctx := context.Background()
	clients := make([]*dlockd.Client, n)
	for i := range clients {
		c, err := dlockd.Dial(ctx, os.Args[2], dlockd.Describe(false))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gobench: dial:", err)
			os.Exit(1)
		}
		clients[i] = c
	}
	var (
		mu  sync.Mutex
		res result
		wg  sync.WaitGroup
	)
	res.Waits = []float64{}
	t0 := time.Now()
	end := t0.Add(time.Duration(secs * float64(time.Second)))
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c *dlockd.Client) {
			defer wg.Done()
			name := fmt.Sprintf("b.%d.%d", os.Getpid(), i)
			opts := []dlockd.LockOption{dlockd.TTL(ttl), dlockd.Wait(0)}
			if handoff {
				name = fmt.Sprintf("h.%d", os.Getpid())
				opts = []dlockd.LockOption{dlockd.TTL(ttl)}
			}
			var ops, errs int64
			var waits []float64
			for time.Now().Before(end) {
				s := time.Now()
				l, err := c.Lock(ctx, name, opts...)
				if err != nil {
					errs++
					continue
				}
				if handoff {
					waits = append(waits, float64(time.Since(s))/float64(time.Millisecond))
				}
				if err := l.Unlock(ctx); err != nil {
					errs++
				}
				ops++
			}
			mu.Lock()
			res.Ops += ops
			res.Errors += errs
			res.Waits = append(res.Waits, waits...)
			mu.Unlock()
		}(i, c)
	}
	wg.Wait()
	res.Secs = time.Since(t0).Seconds()
	for _, c := range clients {
		c.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}
