package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/internal/testenv"
)

// sentinelMaster is the master name the Sentinels of the redis-sentinel
// backend watch.
const sentinelMaster = "chaos"

// redisArgs is how the harness runs every Redis server: persistence as
// docs/operations.md asks for. Redis write(2)s the append-only file before
// it answers; everysec only delays the fsync, so a kill -9 of Redis (not
// of the machine) loses nothing that was acknowledged.
var redisArgs = []string{"--appendonly", "yes", "--appendfsync", "everysec"}

// sentinels is the redis-sentinel backend: a primary, a replica and three
// Sentinels; SentinelFailover asks them to swap the two.
type sentinels struct {
	servers []*testenv.Redis
	watch   []*testenv.Sentinel
}

func (w *world) startSentinels() string {
	p := testenv.StartRedis(w.t, redisArgs...)
	s := &sentinels{servers: []*testenv.Redis{p, testenv.StartReplica(w.t, p, redisArgs...)}}
	addrs := ""
	for i := range 3 {
		s.watch = append(s.watch, testenv.StartSentinel(w.t, sentinelMaster, p, 2))
		if i > 0 {
			addrs += ", "
		}
		addrs += fmt.Sprintf("%q", s.watch[i].Addr())
	}
	w.sentinels = s
	return fmt.Sprintf("sentinel: {master: %s, addrs: [%s]}", sentinelMaster, addrs)
}

// master asks a Sentinel for the primary's port.
func (s *sentinels) master(ctx context.Context) (string, error) {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: s.watch[0].Addr(), MaxRetries: -1})
	defer c.Close()
	a, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return a[1], nil
}

// failover switches primary and replica as docs/operations.md tells
// operators to for a planned switch: writes paused on the primary (so the
// replica is in sync and the primary acknowledges nothing it could lose),
// SENTINEL FAILOVER, the old primary made a replica of the new one as soon
// as the Sentinels name it (the Sentinels' own demotion waits for the
// pause to end), then the pause lifted: the writes that waited meet a
// replica and fail (READONLY), unacknowledged. Without the pause, the old
// primary acknowledges writes between the promotion and its demotion, and
// loses them. It fails the run when the switch takes more than a minute.
func (s *sentinels) failover(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := s.master(ctx)
	if err != nil {
		t.Fatalf("chaos: sentinel master: %v", err)
	}
	old := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + before, MaxRetries: -1})
	defer old.Close()
	if err := old.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
		t.Fatalf("chaos: pause writes on the primary: %v", err)
	}
	defer func() {
		if err := old.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Errorf("chaos: unpause the old primary: %v", err)
		}
	}()
	c := goredis.NewSentinelClient(&goredis.Options{Addr: s.watch[0].Addr(), MaxRetries: -1})
	defer c.Close()
	// Refused while the Sentinel does not yet know the old primary as a
	// replica of the new one, or a failover is in progress.
	for {
		if err = c.Failover(ctx, sentinelMaster).Err(); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("chaos: SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var now string
	for {
		if now, err = s.master(ctx); err == nil && now != before {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("chaos: the Sentinels still name port %s primary after a failover", before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The pause ends once the old primary follows the new one.
	if err := old.Do(ctx, "REPLICAOF", "127.0.0.1", now).Err(); err != nil {
		t.Fatalf("chaos: demote the old primary: %v", err)
	}
	for {
		info, err := old.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("chaos: the old primary on port %s did not become a replica: %v", before, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// staleFailover is the RedisFailover nemesis on the redis backend: the
// replica stops replicating, the primary takes writes the replica misses,
// then the replica is promoted and the proxy sends new connections to it
// (open ones stay on the old primary until they break, as when a proxy or
// virtual address moves). The old primary then replicates from the new
// one, discarding the writes it had alone.
type staleFailover struct {
	primary, replica *testenv.Redis
}

func (w *world) startStaleReplica(primary *testenv.Redis) {
	w.stale = &staleFailover{primary: primary, replica: testenv.StartReplica(w.t, primary, redisArgs...)}
}

func (f *staleFailover) run(w *world) (promoted time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", f.replica.Port), MaxRetries: -1})
	defer rc.Close()
	pc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", f.primary.Port), MaxRetries: -1})
	defer pc.Close()
	// Cut replication: the replica keeps its data and takes nothing more.
	if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		w.t.Fatalf("chaos: cut replication: %v", err)
	}
	time.Sleep(500*time.Millisecond + time.Duration(w.rng.Int64N(int64(2*time.Second))))
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		w.t.Fatalf("chaos: promote the replica: %v", err)
	}
	w.net.proxy.SetUpstream(fmt.Sprintf("127.0.0.1:%d", f.replica.Port))
	if err := pc.Do(ctx, "REPLICAOF", "127.0.0.1", fmt.Sprint(f.replica.Port)).Err(); err != nil {
		w.t.Fatalf("chaos: demote the old primary: %v", err)
	}
	promoted = time.Now()
	f.primary, f.replica = f.replica, f.primary
	// The demoted primary takes a full copy from the new one, which may
	// take seconds; until it has it, a second failover would lose writes
	// made since this one, outside the window the checks allow.
	for {
		info, err := pc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return promoted
		}
		if ctx.Err() != nil {
			w.t.Fatalf("chaos: the demoted primary on port %d did not catch up with the new one: %v", f.replica.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
