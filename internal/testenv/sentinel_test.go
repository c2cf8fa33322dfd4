//go:build linux

package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinelFailsOver starts a primary, a replica and three Sentinels,
// asks for a failover and sees the replica named primary, with the data
// written before.
func TestSentinelFailsOver(t *testing.T) {
	ctx := context.Background()
	p := StartRedis(t)
	r := StartReplica(t, p)
	var ss []*Sentinel
	for range 3 {
		ss = append(ss, StartSentinel(t, "mymaster", p, 2))
	}
	pc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.Port)})
	defer pc.Close()
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Wait(ctx, 1, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: ss[0].Addr()})
	defer sc.Close()
	want := fmt.Sprint(r.Port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Sentinel refuses a failover until it knows a replica to promote.
		err := sc.Failover(ctx, "mymaster").Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		if err == nil && len(addr) == 2 && addr[1] == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the master is still %v (%v), want port %s", addr, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})
	defer rc.Close()
	if v, err := rc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the promoted replica has k=%q (%v)", v, err)
	}
}
