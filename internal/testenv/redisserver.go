//go:build linux

package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// How long a private redis-server may take to become ready, and to stop
// after SIGTERM.
const (
	redisStartTimeout = 30 * time.Second
	redisStopTimeout  = 10 * time.Second
)

// Redis is a private redis-server that one test owns: unlike the shared
// server of RedisURL, the test may kill it, restart it (losing every key
// unless it was started with AOF), or flush it, to see what coordd does
// when Redis loses its data.
//
// It listens on 127.0.0.1 only, on a free port, with no password and no
// persistence (save "" and appendonly no) unless extra arguments say
// otherwise; its files live in a temp dir. t.Cleanup stops it and removes
// the dir; it gets SIGKILL if the test process dies first.
type Redis struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across restarts.
	Port int
	// Dir holds server.log and any persistence files.
	Dir string

	*server
}

// StartRedis starts a private redis-server with extra arguments appended to
// its command line (e.g. "--appendonly", "yes"), waiting until it answers
// PING. A missing binary fails the test (install redis-server).
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	bin := findBinary(t, "redis-server")
	dir, err := os.MkdirTemp("", "coordd-redis-")
	if err != nil {
		t.Fatalf("testenv: redis-server temp dir: %v", err)
	}
	r := &Redis{Port: freePort(t), Dir: dir, server: &server{name: "redis-server", bin: bin, dir: dir, stopTimeout: redisStopTimeout}}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("testenv: last lines of the private redis-server's log:\n%s", r.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	r.args = append([]string{
		"--port", fmt.Sprint(r.Port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
	}, extra...)
	r.Start(t)
	return r
}

// URL is redis://127.0.0.1:PORT/0.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Start starts redis-server (again, after Kill or Stop) on the same port and
// waits until it answers PING.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port), MaxRetries: -1})
	defer c.Close()
	r.start(t, c.Options().Addr, redisStartTimeout, func(ctx context.Context) error { return c.Ping(ctx).Err() })
}
