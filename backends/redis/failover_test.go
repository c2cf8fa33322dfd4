package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// replicaPair is a private primary and its replica (redis-server
// --replicaof), with plain clients on each.
type replicaPair struct {
	primary, replica   *testenv.Redis
	pclient, rclient   *goredis.Client
	primaryURL, repURL string
}

func startReplicaPair(t *testing.T) *replicaPair {
	t.Helper()
	p := testenv.StartRedis(t)
	r := testenv.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(p.Port))
	rp := &replicaPair{primary: p, replica: r, primaryURL: p.URL(), repURL: r.URL(),
		pclient: goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.Port)}),
		rclient: goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})}
	t.Cleanup(func() { rp.pclient.Close(); rp.rclient.Close() })
	return rp
}

// synced waits until the replica has every write the primary made (WAIT).
func (rp *replicaPair) synced(t *testing.T) {
	t.Helper()
	for range 200 {
		n, err := rp.pclient.Wait(context.Background(), 1, 100*time.Millisecond).Result()
		if err == nil && n == 1 {
			return
		}
	}
	t.Fatal("the replica never caught up")
}

// cut stops replication: the replica follows a port nobody listens on,
// keeping its data, and misses every later write of the primary.
func (rp *replicaPair) cut(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := rp.rclient.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if n, err := rp.pclient.Info(ctx, "replication").Result(); err == nil && !strings.Contains(n, "connected_slaves:1") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the replica is still connected to the primary")
}

// promote makes the replica a primary.
func (rp *replicaPair) promote(t *testing.T) {
	t.Helper()
	if err := rp.rclient.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFailoverToStaleReplica: a replica that missed the primary's last
// writes (an acquire, an election, a push) is promoted. The first
// connection to it sees that the marker names another server: every
// counter moves above the server's time, so the fencing number, the term
// and the job id handed out next are above those the lost writes handed
// out, and the semaphores grant no slot for the recorded longest lease
// (the slot taken on the old primary is free here while its holder
// runs). With durable: true the counters move but nothing is held.
func TestFailoverToStaleReplica(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			const lease = 2 * time.Second
			ctx := context.Background()
			rp := startReplicaPair(t)
			opts := backends.Options{Version: "0.1.0", Durable: durable}
			p := openStore(t, rp.primaryURL, "fo:", opts)
			if _, err := p.MarkLoss(ctx, false, lease); err != nil {
				t.Fatal(err)
			}
			sem := backends.SemaphoreConfig{Name: "s", Limit: 1, Lease: lease, Mode: "lease", MaxWaiting: -1}
			if err := p.PutSemaphore(ctx, sem); err != nil {
				t.Fatal(err)
			}
			q := backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3, Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: spec.ClaimPartition}
			if _, err := p.PutQueue(ctx, q); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Push(ctx, "q", backends.PushRequest{Payload: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			term, err := p.ElectLeader(ctx, "h1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.ResignLeader(ctx, term); err != nil {
				t.Fatal(err)
			}
			rp.synced(t)

			// The writes the replica misses.
			rp.cut(t)
			lost, err := p.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "old", Host: "h1", PID: 1, Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			lostTerm, err := p.ElectLeader(ctx, "h1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			lostJob, err := p.Push(ctx, "q", backends.PushRequest{Payload: []byte("b")})
			if err != nil {
				t.Fatal(err)
			}
			rp.promote(t)

			r := openStore(t, rp.repURL, "fo:", opts)
			ls, err := r.ObserveLoss(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ls.Changed {
				t.Fatalf("after the first connection to the promoted replica: %+v, want the change handled", ls)
			}
			_, err = r.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new", Host: "h2", PID: 2, Lease: lease})
			if durable {
				if err != nil {
					t.Fatalf("acquire on a durable backend after the failover: %v, want no hold", err)
				}
			} else {
				if !errors.Is(err, backends.ErrLossHold) {
					t.Fatalf("acquire during the hold after the failover: %v, want ErrLossHold", err)
				}
				if !ls.Holding() || ls.Cause != backends.LossCauseChanged || ls.HoldUntil.Sub(ls.Now) > lease {
					t.Fatalf("marker after the failover: %+v, want a hold of at most the lease (%v) for the change", ls, lease)
				}
				for ls.Holding() {
					time.Sleep(ls.HoldUntil.Sub(ls.Now))
					if ls, err = r.ObserveLoss(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			var g backends.Grant
			for {
				g, err = r.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new2", Host: "h2", PID: 2, Lease: lease})
				if !errors.Is(err, backends.ErrLossHold) {
					break
				}
				time.Sleep(50 * time.Millisecond) // this host's clock ends the hold a moment later
			}
			if err != nil && !errors.Is(err, backends.ErrNoSlot) {
				t.Fatal(err)
			}
			if err == nil && g.Fencing <= lost.Fencing {
				t.Errorf("fencing after the failover %d, want above the lost acquire's %d", g.Fencing, lost.Fencing)
			}
			// The one-slot semaphore's counter stays armed: its next grant
			// is above the lost one too.
			if err == nil {
				if err := r.Release(ctx, backends.SemRef{Name: "s"}, "new2"); err != nil {
					t.Fatal(err)
				}
				g2, err := r.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "new3", Host: "h2", PID: 2, Lease: lease})
				if err != nil || g2.Fencing <= g.Fencing {
					t.Errorf("second acquire after the failover: %+v %v, want fencing above %d", g2, err, g.Fencing)
				}
			}
			newTerm, err := r.ElectLeader(ctx, "h2", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if newTerm.Term <= lostTerm.Term {
				t.Errorf("term after the failover %d, want above the lost election's %d", newTerm.Term, lostTerm.Term)
			}
			job, err := r.Push(ctx, "q", backends.PushRequest{Payload: []byte("c")})
			if err != nil {
				t.Fatal(err)
			}
			if job.ID <= lostJob.ID {
				t.Errorf("job id after the failover %d, want above the lost push's %d", job.ID, lostJob.ID)
			}
			if raise, _ := rp.rclient.HGet(ctx, "fo:{global}:marker", "raise").Result(); raise != "" {
				t.Errorf("the raise token is still set after the counters were raised: %q", raise)
			}
		})
	}
}
