package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// switchProxy is a TCP proxy that stands for the address clients know a
// Redis primary by (a DNS name, a virtual IP): it forwards new connections
// to the current target, and on a switch either cuts the connections it
// holds (clients reconnect to the new target) or lets them run on to the
// old one.
type switchProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func startSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *switchProxy) addr() string { return p.ln.Addr().String() }

func (p *switchProxy) serve(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	u, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
	u.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// switchTo sends new connections to target; with cut, the connections
// open now are closed.
func (p *switchProxy) switchTo(target string, cut bool) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	if cut {
		p.cut()
	}
}

func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// TestRedisFailoverToStaleReplica: clients reach a Redis primary through
// an address that moves (a proxy). Replication to the replica is cut, a
// `sem run` of a limit-1 semaphore takes the slot on the primary, the
// replica (which missed that acquire) is promoted and the address moves to
// it. A second `sem run` gets a higher fencing number than the first, and
// never runs at the same time as the first (the witness): the first stops
// (exit 122) before the second starts. Tried several times, with the
// first holder's connection cut at the switch (it reconnects to the new
// primary), and with it left on the old primary, which is then demoted to
// a replica of the new one (as Sentinel does).
func TestRedisFailoverToStaleReplica(t *testing.T) {
	for _, mode := range []string{"reconnect", "stays-on-old-primary"} {
		t.Run(mode, func(t *testing.T) {
			for try := range 3 {
				redisFailoverTry(t, mode == "reconnect", try)
			}
		})
	}
}

func redisFailoverTry(t *testing.T, cutConns bool, try int) {
	const lease = 3 * time.Second
	ctx := context.Background()
	primary := testenv.StartRedis(t)
	replica := testenv.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	pc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", primary.Port)})
	rc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", replica.Port)})
	defer pc.Close()
	defer rc.Close()
	proxy := startSwitchProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))

	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFileT(t, specPath, fmt.Sprintf(`backends:
  cache: {type: redis, url: "redis://%s/0", key_prefix: "fo:"}
  local: {type: sqlite}
cluster: {backend: local}
semaphores:
  s: {backend: cache, limit: 1, lease: %s}
`, proxy.addr(), lease))
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("try %d: apply: %d\n%s", try, code, out)
	}
	// A holder before the cut, so that the replica has a fencing counter.
	if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true"); code != 0 {
		t.Fatalf("try %d: sem run before the cut: %d\n%s", try, code, out)
	}
	proctest.Eventually(t, 20*time.Second, "the replica in sync", func() bool {
		n, err := pc.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n == 1
	})
	// Cut replication: the replica follows a port nobody listens on.
	if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "replication cut", func() bool {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})

	w := proctest.NewWitness(t)
	f1, f2 := filepath.Join(dir, "f1"), filepath.Join(dir, "f2")
	// The first holder runs long; TERM (its slot lost) still lets it leave
	// the witness.
	first := env.Start(t, fmt.Sprintf("first%d", try), "sem", "run", "s", "-f", specPath, "--no-wait", "--host-id", "h1", "--",
		"sh", "-c", "trap true TERM\n"+w.Script("echo $COORDD_FENCING_TOKEN > "+f1+"; sleep 60"))
	fence1 := waitFile(t, f1, 20*time.Second)

	// The replica, which missed that acquire, takes over.
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if !cutConns {
		// The old primary follows the new one, as Sentinel has it do: a
		// connection still on it can no longer write.
		if err := pc.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	proxy.switchTo(fmt.Sprintf("127.0.0.1:%d", replica.Port), cutConns)
	switched := time.Now()

	second := env.Start(t, fmt.Sprintf("second%d", try), "sem", "run", "s", "-f", specPath, "--wait", "60s", "--host-id", "h2", "--",
		"sh", "-c", w.Script("echo $COORDD_FENCING_TOKEN > "+f2+"; sleep 0.5"))
	if code := second.Wait(t, 90*time.Second); code != 0 {
		t.Fatalf("try %d: the second sem run exited %d\n%s", try, code, second.Output())
	}
	fence2 := strings.TrimSpace(readFileT(t, f2))
	n1, err1 := strconv.ParseInt(strings.TrimSpace(fence1), 10, 64)
	n2, err2 := strconv.ParseInt(fence2, 10, 64)
	if err1 != nil || err2 != nil || n2 <= n1 {
		t.Errorf("try %d: fencing numbers %q then %q after the failover, want the second higher", try, fence1, fence2)
	}
	if code := first.Wait(t, 30*time.Second); code != 122 {
		t.Errorf("try %d: the first holder exited %d, want 122 (its slot lost)\n%s", try, code, first.Output())
	}
	if runs, peak := w.Peak(t); runs != 2 || peak != 1 {
		t.Errorf("try %d: witness: %d runs, peak %d holders at once; want 2 runs, never together", try, runs, peak)
	}
	t.Logf("try %d: fencing %s then %s; the second holder done %v after the switch", try, strings.TrimSpace(fence1), fence2, time.Since(switched).Round(time.Millisecond))
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
