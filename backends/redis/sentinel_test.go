package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestSentinelStoreFollowsFailover opens a store through one Sentinel,
// switches primary and replica, and sees the store's writes reach the new
// primary, and the store's first connection to it notice the change of
// server (the marker's check runs on the primary's connections, not on
// the Sentinels').
func TestSentinelStoreFollowsFailover(t *testing.T) {
	ctx := context.Background()
	p := testenv.StartRedis(t)
	r := testenv.StartReplica(t, p)
	sn := testenv.StartSentinel(t, "mymaster", p, 1)
	s, err := redis.OpenSentinel(ctx, "cache", &spec.RedisSentinel{Master: "mymaster", Addrs: []string{sn.Addr()}}, "sentinel:", backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Now(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkLoss(ctx, false, time.Minute); err != nil {
		t.Fatal(err)
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sn.Addr()})
	defer sc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for sc.Failover(ctx, "mymaster").Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the Sentinel never accepted SENTINEL FAILOVER")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		if err == nil && len(a) == 2 && a[1] == fmt.Sprint(r.Port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel still names %v (%v) primary", a, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})
	defer rc.Close()
	for {
		// A write that met the old primary's connection as it closed, or
		// the old primary as a replica (READONLY), fails; a later one
		// reaches the new primary.
		if err := s.Client().Set(ctx, "sentinel:after", "x", 0).Err(); err == nil {
			if v, _ := rc.Get(ctx, "sentinel:after").Result(); v == "x" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the store's writes never reached the promoted replica")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info, err := rc.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("the replica is not primary: %v\n%s", err, info)
	}
	ls, err := s.ObserveLoss(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ls.Holding() || ls.Cause != backends.LossCauseChanged {
		t.Fatalf("after the failover: %+v, want a hold for a changed server", ls)
	}
}

// TestSentinelOpenErrorHidesPasswords opens a store through a Sentinel
// that is not there: the error names the master and the address, never a
// password.
func TestSentinelOpenErrorHidesPasswords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := redis.OpenSentinel(ctx, "cache", &spec.RedisSentinel{Master: "mymaster", Addrs: []string{"127.0.0.1:1"}, Password: "hunter2", SentinelPassword: "swordfish"}, "x:", backends.Options{})
	if err == nil {
		t.Fatal("opened a store through a Sentinel that does not run")
	}
	if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "swordfish") || !strings.Contains(msg, "mymaster") {
		t.Fatalf("error %q", msg)
	}
}
