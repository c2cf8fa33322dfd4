//go:build linux

package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a private Redis Sentinel (redis-server --sentinel) that one
// test owns, watching a private primary under a master name. Its config
// file is generated in its own temp dir, which Sentinel rewrites as it
// learns about replicas, other Sentinels and failovers.
type Sentinel struct {
	Port int
	Dir  string

	*server
}

// Sentinel timings for tests: a primary is down after 1 s without an
// answer, and a failover that stalls is tried again after 5 s.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 5 * time.Second
)

// StartSentinel starts a Sentinel that monitors primary under master with
// the given quorum, and waits until it answers PING.
func StartSentinel(t testing.TB, master string, primary *Redis, quorum int) *Sentinel {
	t.Helper()
	bin := findBinary(t, "redis-server")
	dir, err := os.MkdirTemp("", "coordd-sentinel-")
	if err != nil {
		t.Fatalf("testenv: sentinel temp dir: %v", err)
	}
	s := &Sentinel{Port: freePort(t), Dir: dir, server: &server{name: "redis sentinel", bin: bin, dir: dir, stopTimeout: redisStopTimeout}}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("testenv: last lines of the private sentinel's log:\n%s", s.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, s.Port, dir, master, primary.Port, quorum, master, sentinelDownAfter.Milliseconds(), master, sentinelFailoverTimeout.Milliseconds(), master)
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.args = []string{path, "--sentinel"}
	s.Start(t)
	return s
}

// Addr is 127.0.0.1:PORT.
func (s *Sentinel) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// Start starts the Sentinel (again) and waits until it answers PING.
func (s *Sentinel) Start(t testing.TB) {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	s.start(t, s.Addr(), redisStartTimeout, func(ctx context.Context) error { return c.Ping(ctx).Err() })
}

// StartReplica starts a private redis-server replicating primary, with
// extra arguments, and waits until its link to the primary is up.
func StartReplica(t testing.TB, primary *Redis, extra ...string) *Redis {
	t.Helper()
	r := StartRedis(t, append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(primary.Port)}, extra...)...)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(redisStartTimeout)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: the replica of 127.0.0.1:%d did not sync within %s: %v\n%s", primary.Port, redisStartTimeout, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
