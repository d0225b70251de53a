// SPDX-License-Identifier: MIT
//
// etcdbench: etcd's lock as a driver of tests/bench/etcd.py, the twin of
// gobench and clientbench.c (same command line, same output):
//
//	etcdbench pairs|handoff <etcd client URL> <clients> <seconds>
//
// (<etcd client URL> http://host:port; grpcs://host:port for the gRPC
// mode below.)
//
// It calls etcd's lock service (v3lock: Lock/Unlock, the server side of
// concurrency.Mutex) through etcd's JSON gRPC gateway over HTTP/1.1, with
// the Go standard library only (no module can be downloaded here):
//
//	POST /v3/lease/grant  {"TTL": s}                -> {"ID": "<lease>"}
//	POST /v3/lock/lock    {"name": b64, "lease": id} -> {"key": b64}
//	POST /v3/lock/unlock  {"key": b64}
//	POST /v3/lease/revoke {"ID": "<lease>"}
//
// With a grpcs:// URL it makes the same calls by gRPC itself
// (etcdserverpb.Lease/LeaseGrant, v3lockpb.Lock/Lock, v3lockpb.Lock/Unlock,
// etcdserverpb.Lease/LeaseRevoke), the protobuf messages encoded by hand,
// over the standard library's HTTP/2 client, which needs TLS: what a
// clientv3 program sends, without the gateway's HTTP/1.1, JSON and its
// second gRPC hop inside etcd. The server's certificate is not checked
// (a private test server).
//
// Each client is a goroutine with an http.Client of its own (its own
// keep-alive connection) and a lease of its own, granted once at start
// (TTL 10 s, or the run's length + 10 s when longer: nothing expires
// during a run) and revoked at the end. pairs: each client locks a name
// of its own and unlocks it, one after the other. handoff: every client
// locks ONE name (waiting: v3lock queues by creation revision, FIFO),
// unlocks it at once and asks again; the wait of each acquisition, from
// the call to the grant, is kept. Prints one JSON line: {"ops", "secs",
// "errors", "waits_ms"}.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type result struct {
	Ops    int64     `json:"ops"`
	Secs   float64   `json:"secs"`
	Errors int64     `json:"errors"`
	Waits  []float64 `json:"waits_ms"`
}

type client struct {
	base  string
	hc    *http.Client
	lease string
	grpc  bool // gRPC over TLS (HTTP/2) instead of the JSON gateway
}

// call POSTs req as JSON to base+path and decodes the answer into resp;
// an HTTP status other than 200 or an "error" in the body is an error.
func (c *client) call(path string, req, resp interface{}) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := c.hc.Post(c.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", path, r.StatusCode, strings.TrimSpace(string(data)))
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return fmt.Errorf("%s: %s", path, e.Error)
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(data, resp)
}

func (c *client) grant(ttl int64) error {
	if c.grpc {
		// LeaseGrantRequest{TTL = 1} -> LeaseGrantResponse{ID = 2}
		r, err := c.rpc("/etcdserverpb.Lease/LeaseGrant", pbInt(1, ttl))
		if err != nil {
			return err
		}
		id, ok := pbField(r, 2)
		if !ok || id.n == 0 {
			return fmt.Errorf("lease grant: no ID")
		}
		c.lease = strconv.FormatInt(int64(id.n), 10)
		return nil
	}
	var r struct {
		ID string `json:"ID"`
	}
	if err := c.call("/v3/lease/grant", map[string]int64{"TTL": ttl}, &r); err != nil {
		return err
	}
	if r.ID == "" {
		return fmt.Errorf("lease grant: no ID")
	}
	c.lease = r.ID
	return nil
}

// lock returns the key v3lock made for this lease under the name
// ("<name>/<lease in hex>"), base64 as the gateway gives it.
func (c *client) lock(name string) (string, error) {
	if c.grpc {
		// LockRequest{name = 1, lease = 2} -> LockResponse{key = 2}
		lease, _ := strconv.ParseInt(c.lease, 10, 64)
		msg := append(pbBytes(1, []byte(name)), pbInt(2, lease)...)
		r, err := c.rpc("/v3lockpb.Lock/Lock", msg)
		if err != nil {
			return "", err
		}
		key, ok := pbField(r, 2)
		if !ok || len(key.b) == 0 {
			return "", fmt.Errorf("lock: no key")
		}
		return string(key.b), nil
	}
	var r struct {
		Key string `json:"key"`
	}
	err := c.call("/v3/lock/lock", map[string]string{"name": name, "lease": c.lease}, &r)
	if err == nil && r.Key == "" {
		err = fmt.Errorf("lock: no key")
	}
	return r.Key, err
}

func (c *client) unlock(key string) error {
	if c.grpc { // UnlockRequest{key = 1}
		_, err := c.rpc("/v3lockpb.Lock/Unlock", pbBytes(1, []byte(key)))
		return err
	}
	return c.call("/v3/lock/unlock", map[string]string{"key": key}, nil)
}

func (c *client) revoke() error {
	if c.grpc { // LeaseRevokeRequest{ID = 1}
		lease, _ := strconv.ParseInt(c.lease, 10, 64)
		_, err := c.rpc("/etcdserverpb.Lease/LeaseRevoke", pbInt(1, lease))
		return err
	}
	return c.call("/v3/lease/revoke", map[string]string{"ID": c.lease}, nil)
}

// rpc makes one unary gRPC call (HTTP/2 over TLS, the standard library's
// client) and returns the response message: a 5-byte frame header (flag,
// big-endian length) before the protobuf, the status in the trailers (or
// in the headers of a trailers-only answer).
func (c *client) rpc(method string, msg []byte) ([]byte, error) {
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequest("POST", c.base+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	r, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	st, sm := r.Trailer.Get("Grpc-Status"), r.Trailer.Get("Grpc-Message")
	if st == "" {
		st, sm = r.Header.Get("Grpc-Status"), r.Header.Get("Grpc-Message")
	}
	if r.StatusCode != http.StatusOK || st != "0" {
		return nil, fmt.Errorf("%s: HTTP %d, grpc-status %q: %s", method, r.StatusCode, st, sm)
	}
	if len(data) < 5 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		return nil, fmt.Errorf("%s: bad gRPC frame", method)
	}
	return data[5:], nil
}

func pbVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func pbInt(field int, v int64) []byte {
	return pbVarint(pbVarint(nil, uint64(field)<<3), uint64(v))
}

func pbBytes(field int, v []byte) []byte {
	b := pbVarint(pbVarint(nil, uint64(field)<<3|2), uint64(len(v)))
	return append(b, v...)
}

type pbValue struct {
	n uint64 // a varint field
	b []byte // a length-delimited field
}

var errPB = errors.New("bad protobuf")

// pbField finds the top-level field of that number in a message (varint
// and length-delimited fields only, which is all these messages have).
func pbField(m []byte, field int) (pbValue, bool) {
	varint := func() (uint64, error) {
		var v uint64
		for s := uint(0); s < 64; s += 7 {
			if len(m) == 0 {
				return 0, errPB
			}
			c := m[0]
			m = m[1:]
			v |= uint64(c&0x7f) << s
			if c < 0x80 {
				return v, nil
			}
		}
		return 0, errPB
	}
	for len(m) > 0 {
		tag, err := varint()
		if err != nil {
			return pbValue{}, false
		}
		var v pbValue
		switch tag & 7 {
		case 0:
			if v.n, err = varint(); err != nil {
				return pbValue{}, false
			}
		case 2:
			n, err := varint()
			if err != nil || n > uint64(len(m)) {
				return pbValue{}, false
			}
			v.b, m = m[:n], m[n:]
		default:
			return pbValue{}, false
		}
		if int(tag>>3) == field {
			return v, true
		}
	}
	return pbValue{}, false
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func main() {
	if len(os.Args) != 5 || (os.Args[1] != "pairs" && os.Args[1] != "handoff") {
		fmt.Fprintln(os.Stderr, "usage: etcdbench pairs|handoff <etcd client URL> <clients> <seconds>")
		os.Exit(64)
	}
	handoff := os.Args[1] == "handoff"
	base := strings.TrimRight(os.Args[2], "/")
	grpc := strings.HasPrefix(base, "grpcs://")
	if grpc {
		base = "https://" + strings.TrimPrefix(base, "grpcs://")
	} else if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	n, _ := strconv.Atoi(os.Args[3])
	secs, _ := strconv.ParseFloat(os.Args[4], 64)
	if n < 1 || n > 256 {
		fmt.Fprintln(os.Stderr, "etcdbench: 1 to 256 clients")
		os.Exit(64)
	}
	ttl := int64(10)
	if int64(secs)+10 > ttl {
		ttl = int64(secs) + 10
	}
	clients := make([]*client, n)
	for i := range clients {
		tr := &http.Transport{MaxIdleConns: 1, MaxIdleConnsPerHost: 1,
			MaxConnsPerHost: 1, DisableCompression: true}
		if grpc {
			tr.ForceAttemptHTTP2 = true
			tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, // a private test server
				NextProtos: []string{"h2"}}
		}
		c := &client{base: base, hc: &http.Client{Transport: tr}, grpc: grpc}
		if err := c.grant(ttl); err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench:", err)
			os.Exit(1)
		}
		clients[i] = c
	}
	var (
		mu   sync.Mutex
		res  result
		wg   sync.WaitGroup
		last error
	)
	res.Waits = []float64{}
	t0 := time.Now()
	end := t0.Add(time.Duration(secs * float64(time.Second)))
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c *client) {
			defer wg.Done()
			name := fmt.Sprintf("b.%d.%d", os.Getpid(), i)
			if handoff {
				name = fmt.Sprintf("h.%d", os.Getpid())
			}
			if !c.grpc {
				name = b64(name)
			}
			var ops, errs int64
			var waits []float64
			var lerr error
			for time.Now().Before(end) {
				s := time.Now()
				key, err := c.lock(name)
				if err != nil {
					errs++
					lerr = err
					continue
				}
				if handoff {
					waits = append(waits, float64(time.Since(s))/float64(time.Millisecond))
				}
				if err := c.unlock(key); err != nil {
					errs++
					lerr = err
				}
				ops++
			}
			mu.Lock()
			res.Ops += ops
			res.Errors += errs
			res.Waits = append(res.Waits, waits...)
			if lerr != nil {
				last = lerr
			}
			mu.Unlock()
		}(i, c)
	}
	wg.Wait()
	res.Secs = time.Since(t0).Seconds()
	for _, c := range clients {
		if err := c.revoke(); err != nil {
			res.Errors++
			last = err
		}
		c.hc.CloseIdleConnections()
	}
	if last != nil {
		fmt.Fprintln(os.Stderr, "etcdbench: last error:", last)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}
