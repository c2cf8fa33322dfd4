//go:build linux

package testenv

import (
	"errors"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
)

// TestStartMemcachedRestartLosesKeys: a kill and start of the private
// memcached loses every key and keeps the port.
func TestStartMemcachedRestartLosesKeys(t *testing.T) {
	m := StartMemcached(t)
	c := memcache.New(m.Addr())
	defer c.Close()
	if err := c.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	m.Start(t)
	c2 := memcache.New(m.Addr()) // c's pooled connection died with the server
	defer c2.Close()
	if _, err := c2.Get("k"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("after a restart: %v, want a cache miss", err)
	}
}
