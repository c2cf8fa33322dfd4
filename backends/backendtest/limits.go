package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// fuzzMaxPayload is the max_payload of the fuzzed queue: small, so that
// the fuzzer crosses it often.
const fuzzMaxPayload = 64

// LimitSeeds are the corner cases of the limits of spec/limits.go: each
// side of every bound, multi-byte UTF-8 cut at the bound, invalid UTF-8,
// control characters and a GBK-style quote. FuzzLimits adds them all, so
// that `go test` checks them on every run.
var LimitSeeds = struct {
	Keys, Hosts []string
	Payloads    [][]byte
}{
	Keys: []string{
		"", "k", "user:42", "x'; DROP TABLE t; --", "é", "\ufffd", "😀",
		strings.Repeat("k", spec.MaxKeyLen), strings.Repeat("k", spec.MaxKeyLen+1), strings.Repeat("k", 300),
		strings.Repeat("a", spec.MaxKeyLen-2) + "é", strings.Repeat("a", spec.MaxKeyLen-1) + "é",
		strings.Repeat("a", spec.MaxKeyLen-4) + "😀", strings.Repeat("a", spec.MaxKeyLen-3) + "😀",
		strings.Repeat("a", spec.MaxKeyLen-1) + "\xc3",
		"\xbf'", "\xff", "a\xc3", "\xed\xa0\x80", "\x00", "a\x00b", "\n", "a\nb", "\t", "\r",
		"\x1b", "\x1b[2J", "\x7f", "\u0085", "\u009b", "\u2028",
	},
	Hosts: []string{
		"web1", "WEB1", "Web-1.example_2", "0", strings.Repeat("h", spec.MaxHostIDLen), strings.Repeat("h", spec.MaxHostIDLen+1),
		"", "-web", ".", "_x", "web 1", "é", "web1\n", "a\n\x1b[2J", "\xbf'", "\x00", "h\x00", "\x1b", "web:1", "web/1",
	},
	Payloads: [][]byte{
		nil, {}, []byte("job"), []byte("\x00\xff\xfe\xbf'\n\x1b"),
		bytes.Repeat([]byte("p"), fuzzMaxPayload), bytes.Repeat([]byte("p"), fuzzMaxPayload+1),
	},
}

// FuzzLimits checks that a backend and the shared limits agree. For each
// input, whatever the backend implements of queues, semaphores and the
// host registry is driven with it:
//
//   - a push with the key and the payload: when backends.CheckPush and the
//     queue's max_payload accept them, the push succeeds and a claim reads
//     both back byte for byte; otherwise it fails with spec.ErrInvalidKey
//     or backends.ErrPayloadTooLarge and the queue holds no job;
//   - an acquire with the host: accepted, the holder list shows the host
//     byte for byte; refused, spec.ErrInvalidHostID and no holder;
//   - a heartbeat with the host: accepted, the host list shows it;
//     refused, spec.ErrInvalidHostID and the list is unchanged.
//
// open returns one migrated-or-not handle on a fresh store, closed by tb's
// cleanup; every input uses that one store.
func FuzzLimits(f *testing.F, open func(tb testing.TB) backends.Backend) {
	b := open(f)
	ctx := f.Context()
	if m, ok := b.(backends.Migrator); ok {
		if err := m.Migrate(ctx); err != nil {
			f.Fatalf("migrate: %v", err)
		}
	}
	const name = "fuzz"
	q, hasQueues := b.Queues(), hasQueues(b)
	if hasQueues {
		cfg := queueConfig(name, 1)
		cfg.Unique, cfg.MaxPayload = spec.UniqueNone, fuzzMaxPayload
		if _, err := q.PutQueue(ctx, cfg); err != nil {
			f.Fatalf("put queue: %v", err)
		}
	}
	sems, hasSems := b.Semaphores(), hasSemaphores(b)
	if hasSems {
		err := sems.PutSemaphore(ctx, backends.SemaphoreConfig{Name: name, Limit: 1, Lease: time.Minute, Mode: spec.ModeLease, MaxWaiting: -1})
		if err != nil {
			f.Fatalf("put semaphore: %v", err)
		}
	}
	reg, hasHosts := b.Cluster(), hasCluster(b)

	s := LimitSeeds
	for i := range max(len(s.Keys), len(s.Hosts), len(s.Payloads)) {
		f.Add(s.Keys[i%len(s.Keys)], s.Hosts[i%len(s.Hosts)], s.Payloads[i%len(s.Payloads)])
	}
	f.Fuzz(func(t *testing.T, key, host string, payload []byte) {
		if hasQueues {
			fuzzPush(t, b, q, name, key, payload)
		}
		if hasSems {
			fuzzAcquire(t, sems, name, host)
		}
		if hasHosts {
			fuzzHeartbeat(t, reg, host)
		}
	})
}

func fuzzPush(t *testing.T, b backends.Backend, q backends.Queues, name, key string, payload []byte) {
	ctx := t.Context()
	want := backends.CheckPush(backends.PushRequest{Key: key, Payload: payload})
	if want == nil {
		want = backends.CheckPayload(len(payload), fuzzMaxPayload)
	}
	j, err := q.Push(ctx, name, backends.PushRequest{Key: key, Payload: payload})
	if want != nil {
		target := spec.ErrInvalidKey
		if errors.Is(want, backends.ErrPayloadTooLarge) {
			target = backends.ErrPayloadTooLarge
		}
		if !errors.Is(err, target) {
			t.Fatalf("push key %q payload %q: got job %d, error %v; the limits say %v", key, payload, j.ID, err, want)
		}
		st := observeQueue(t, queuesOf(t, b), name)
		if n := st.Jobs(); n != 0 {
			t.Fatalf("push key %q payload %q was refused (%v) but the queue holds %d jobs", key, payload, err, n)
		}
		return
	}
	if err != nil {
		t.Fatalf("push key %q payload %q: %v; the limits accept it", key, payload, err)
	}
	jobs, err := q.Claim(ctx, name, newOwner("fuzz"), 1)
	ok(t, err, "claim")
	if len(jobs) != 1 || jobs[0].ID != j.ID {
		t.Fatalf("push key %q: claimed %+v, want job %d", key, jobs, j.ID)
	}
	if got := jobs[0]; got.Key != key || !bytes.Equal(got.Payload, payload) {
		t.Fatalf("push key %q payload %q: read back key %q payload %q", key, payload, got.Key, got.Payload)
	}
	ok(t, q.Ack(ctx, jobs[0]), "ack")
}

func fuzzAcquire(t *testing.T, s backends.Semaphores, name, host string) {
	ctx := t.Context()
	want := backends.CheckAcquire(backends.AcquireRequest{Host: host})
	owner := newOwner("fuzz")
	_, err := s.TryAcquire(ctx, backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: host, PID: 7, Lease: time.Minute})
	holders, herr := s.Holders(ctx, backends.SemRef{Name: name})
	ok(t, herr, "holders")
	if want != nil {
		if !errors.Is(err, spec.ErrInvalidHostID) {
			t.Fatalf("acquire as host %q: error %v; the limits say %v", host, err, want)
		}
		if len(holders) != 0 {
			t.Fatalf("acquire as host %q was refused but the semaphore has holders %+v", host, holders)
		}
		return
	}
	if err != nil {
		t.Fatalf("acquire as host %q: %v; the limits accept it", host, err)
	}
	if len(holders) != 1 || holders[0].Owner != owner || holders[0].Host != host {
		t.Fatalf("acquire as host %q: holders %+v, want %s on host %q", host, holders, owner, host)
	}
	ok(t, s.Release(ctx, backends.SemRef{Name: name}, owner), "release")
}

func fuzzHeartbeat(t *testing.T, r backends.Cluster, host string) {
	ctx := t.Context()
	want := backends.CheckHeartbeat(backends.HostRecord{Host: host})
	// Start from an empty list: every earlier record is older than now.
	if _, err := r.PruneHosts(ctx, 0); err != nil {
		t.Fatalf("prune: %v", err)
	}
	before, err := r.ListHosts(ctx)
	ok(t, err, "list hosts")
	err = r.Heartbeat(ctx, hostRec(host, "run", "hash"))
	after, lerr := r.ListHosts(ctx)
	ok(t, lerr, "list hosts")
	var found *backends.HostRecord
	for i, h := range after.Hosts {
		if h.Host == host {
			found = &after.Hosts[i]
		}
	}
	if want != nil {
		if !errors.Is(err, spec.ErrInvalidHostID) {
			t.Fatalf("heartbeat as host %q: error %v; the limits say %v", host, err, want)
		}
		if len(after.Hosts) != len(before.Hosts) || found != nil {
			t.Fatalf("heartbeat as host %q was refused but the hosts went from %d to %d", host, len(before.Hosts), len(after.Hosts))
		}
		return
	}
	if err != nil {
		t.Fatalf("heartbeat as host %q: %v; the limits accept it", host, err)
	}
	if found == nil || found.RunID != "run" {
		t.Fatalf("heartbeat as host %q: not listed byte for byte in %s", host, fmt.Sprint(after.Hosts))
	}
}
