//go:build linux

package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStartRedisRestartLosesData: the private redis-server keeps no data
// across a kill and start (no persistence), and keeps its port.
func TestStartRedisRestartLosesData(t *testing.T) {
	r := StartRedis(t)
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if r.Running() {
		t.Fatal("running after Kill")
	}
	r.Start(t)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after a restart without persistence: exists %d, %v; want 0", n, err)
	}
}
