//go:build linux

package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// How long a private memcached may take to become ready and to stop.
const (
	memcachedStartTimeout = 30 * time.Second
	memcachedStopTimeout  = 10 * time.Second
)

// Memcached is a private memcached that one test owns: the test may kill
// and restart it (every key is lost) to see what coordd does. It listens on
// 127.0.0.1 only, on a free port; extra arguments are appended to its
// command line (e.g. "-M" to refuse evictions). t.Cleanup stops it; it
// gets SIGKILL if the test process dies first.
type Memcached struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across restarts.
	Port int

	*server
}

// StartMemcached starts a private memcached, waiting until it answers. A
// missing binary fails the test (install memcached).
func StartMemcached(t testing.TB, extra ...string) *Memcached {
	t.Helper()
	bin := findBinary(t, "memcached")
	dir, err := os.MkdirTemp("", "coordd-memcached-")
	if err != nil {
		t.Fatalf("testenv: memcached temp dir: %v", err)
	}
	m := &Memcached{Port: freePort(t), server: &server{name: "memcached", bin: bin, dir: dir, stopTimeout: memcachedStopTimeout}}
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			t.Logf("testenv: last lines of the private memcached's log:\n%s", m.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	m.args = append([]string{"-l", "127.0.0.1", "-p", fmt.Sprint(m.Port), "-U", "0", "-m", "64"}, extra...)
	if os.Geteuid() == 0 {
		m.args = append(m.args, "-u", "root")
	}
	m.Start(t)
	return m
}

// Addr is 127.0.0.1:PORT.
func (m *Memcached) Addr() string { return fmt.Sprintf("127.0.0.1:%d", m.Port) }

// Start starts memcached (again, after Kill or Stop) on the same port and
// waits until it answers.
func (m *Memcached) Start(t testing.TB) {
	t.Helper()
	c := memcache.New(m.Addr())
	c.Timeout = time.Second
	defer c.Close()
	m.start(t, m.Addr(), memcachedStartTimeout, func(context.Context) error { return c.Ping() })
}
