// daemon_test.go: test helpers that run the real dlockd (and redis-server
// for fail-over tests), on free loopback ports, stopped by PID at cleanup.

package dlockd

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func dlockdBin(t *testing.T) string {
	p := os.Getenv("DLOCKD")
	if p == "" {
		p = "../../build/dlockd" // make's default build
	}
	if _, err := os.Stat(p); err != nil {
		// never skipped: a suite that passes without a daemon proves
		// nothing (make check sets DLOCKD)
		t.Fatalf("no dlockd binary at %s (set DLOCKD)", p)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort asks the kernel for a free loopback port.
// freePort returns a port from below the kernel's ephemeral range (32768
// and up): a port Listen(":0") hands out may become the local port of
// another process's outgoing connection while its server restarts, which
// then cannot bind it again.
// Go 1.19's global source starts at the same seed in every process.
var portRand = rand.New(rand.NewSource(time.Now().UnixNano() ^ int64(os.Getpid())<<32))
var portMu sync.Mutex

func freePort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 1000; i++ {
		portMu.Lock()
		port := 20000 + portRand.Intn(12000)
		portMu.Unlock()
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port")
	return 0
}

type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	port int
	addr string
	log  string
	done chan struct{}
}

// start runs a process, logging to a file, killed by PID at cleanup.
func start(t *testing.T, name, bin string, port int, args ...string) *proc {
	t.Helper()
	logf := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), log: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() || os.Getenv("DLOCKD_TEST_LOGS") != "" {
			b, _ := os.ReadFile(logf)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("---- %s log (tail) ----\n%s", name, strings.Join(lines, "\n"))
		}
	})
	return p
}

func (p *proc) signal(s syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(s)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// waitListening waits until the port accepts connections.
func (p *proc) waitListening(timeout time.Duration) {
	p.t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			p.t.Fatalf("%s exited early:\n%s", p.name, b)
		default:
		}
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("%s does not listen on %s after %v", p.name, p.addr, timeout)
}

// startDlockd runs a memory-only daemon.
func startDlockd(t *testing.T, extra ...string) *proc {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--persist", "none", "--port", fmt.Sprint(port), "-l", "info"}, extra...)
	p := start(t, "dlockd", dlockdBin(t), port, args...)
	p.waitListening(20 * time.Second)
	return p
}

func startRedis(t *testing.T) *proc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("no redis-server (make deps installs it)")
	}
	port := freePort(t)
	p := start(t, "redis", bin, port, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--dir", t.TempDir())
	p.waitListening(20 * time.Second)
	return p
}

// startNode runs a daemon of a cluster on redis.
func startNode(t *testing.T, redis *proc, node string, port int) *proc {
	t.Helper()
	return start(t, "dlockd-"+node, dlockdBin(t), port,
		"--persist", "redis", "--redis", fmt.Sprintf("redis://127.0.0.1:%d/0", redis.port),
		"--node-id", node, "--leader-lease", "2s", "--port", fmt.Sprint(port), "-l", "info",
		"--state-dir", t.TempDir())
}

// raw sends request lines on a connection of its own and returns the
// first reply line of each.
func raw(t *testing.T, addr string, lines ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	var out []string
	for _, l := range lines {
		if _, err := fmt.Fprintf(c, "%s\r\n", l); err != nil {
			t.Fatal(err)
		}
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			s = strings.TrimRight(s, "\r\n")
			if strings.HasPrefix(s, "* ") {
				continue
			}
			out = append(out, s)
			break
		}
	}
	return out
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, servers string, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{ConnectTimeout(10 * time.Second), ServerTimeout(10 * time.Second)}, opts...)
	c, err := Dial(ctxT(t, 20*time.Second), servers, opts...)
	if err != nil {
		t.Fatalf("Dial %s: %v", servers, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls f until it is true or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
