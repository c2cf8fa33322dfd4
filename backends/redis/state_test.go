package redis

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// openStateStores opens n handles on one fresh key prefix (closed by
// t.Cleanup before testenv deletes the prefix's keys), for the tests of
// the state, leader and cron code that reach behind the Store's back
// through its key builders.
func openStateStores(t *testing.T, n int, opts backends.Options) []*Store {
	t.Helper()
	url, prefix := testenv.RedisURL(t)
	var out []*Store
	for range n {
		s, err := Open(context.Background(), "cluster", url, prefix, opts)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		out = append(out, s)
	}
	return out
}

// stateKeysUnder lists every key under the store's prefix.
func stateKeysUnder(t *testing.T, s *Store) []string {
	t.Helper()
	var all []string
	var cursor uint64
	for {
		ks, next, err := s.Client().Scan(t.Context(), cursor, s.Prefix()+"*", 1000).Result()
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		all = append(all, ks...)
		if cursor = next; cursor == 0 {
			return all
		}
	}
}

// TestReadOnlyCreatesNothing: a read-only store reads an empty prefix as
// empty, refuses every write with ErrReadOnly, and leaves no key behind.
func TestReadOnlyCreatesNothing(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{ReadOnly: true})[0]
	ctx := t.Context()

	st, err := s.LoadState(ctx)
	if err != nil || len(st.Entries) != 0 || st.Last != nil {
		t.Fatalf("load state: %+v, %v; want empty", st, err)
	}
	if _, err := s.FindApply(ctx, "h"); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("find apply: %v, want ErrNotFound", err)
	}
	if _, err := s.CurrentLeader(ctx); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("current leader: %v, want ErrNotFound", err)
	}
	if due, next, err := s.DueTasks(ctx, 10); err != nil || len(due) != 0 || !next.IsZero() {
		t.Fatalf("due tasks: %v %v %v", due, next, err)
	}
	if m, err := s.ObserveCrons(ctx, []string{"a", "b"}); err != nil || len(m) != 0 {
		t.Fatalf("observe crons: %v %v", m, err)
	}
	for what, err := range map[string]error{
		"running":  stateErr(s.Running(ctx, "a")),
		"history":  stateErr(s.History(ctx, "a", 0)),
		"pending":  stateErr(s.PendingRetries(ctx, 0)),
		"expired":  stateErr(s.ExpiredOccurrences(ctx, 0)),
		"lock":     stateErr(s.TryLockApply(ctx, "me", time.Minute)),
		"commit":   stateErr(s.CommitApply(ctx, "me", backends.ApplyRecord{}, nil, nil)),
		"elect":    stateErr(s.ElectLeader(ctx, "me", time.Minute)),
		"put cron": s.PutCron(ctx, "a", json.RawMessage(`{}`), time.Now(), true),
		"claim":    stateErr(s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "a", Attempt: 1, Owner: "o", Manual: true, Lease: time.Minute})),
	} {
		switch what {
		case "running", "history", "pending", "expired":
			if err != nil {
				t.Errorf("%s on a read-only store: %v", what, err)
			}
		default:
			if !errors.Is(err, ErrReadOnly) {
				t.Errorf("%s on a read-only store: %v, want ErrReadOnly", what, err)
			}
		}
	}
	if ks := stateKeysUnder(t, s); len(ks) != 0 {
		t.Fatalf("a read-only store created keys: %v", ks)
	}
}

func stateErr[T any](_ T, err error) error { return err }

// TestStateGenerationCounterLoss: a generation counter lost while the
// state survives (keys deleted by hand, a partial restore) restarts above
// every generation still recorded, never handing one out twice.
func TestStateGenerationCounterLoss(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	unlock, err := s.TryLockApply(ctx, "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(ctx)
	commit := func(hash string, put ...string) int64 {
		t.Helper()
		var es []backends.InventoryEntry
		for _, n := range put {
			es = append(es, backends.InventoryEntry{Address: spec.Address{Kind: spec.KindSemaphore, Name: n},
				Placement: backends.Placement{Backend: "r", BackendType: spec.TypeRedis, Spec: json.RawMessage(`{"limit":1}`)},
				Status:    backends.StatusActive})
		}
		gen, err := s.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: hash, Host: "h"}, es, nil)
		if err != nil {
			t.Fatalf("commit %s: %v", hash, err)
		}
		return gen
	}
	for i, h := range []string{"a", "b", "c"} {
		if gen := commit(h, "s"+h); gen != int64(i+1) {
			t.Fatalf("commit %s: generation %d, want %d", h, gen, i+1)
		}
	}
	// The counter alone is lost: it restarts from the last record.
	if err := s.Client().Del(ctx, s.keys.stateGeneration()).Err(); err != nil {
		t.Fatal(err)
	}
	if gen := commit("d", "sd"); gen != 4 {
		t.Fatalf("after losing the counter: generation %d, want 4", gen)
	}
	// The counter and the log are lost, the inventory survives: it
	// restarts above the entries' generations.
	if err := s.Client().Del(ctx, s.keys.stateGeneration(), s.keys.stateLog()).Err(); err != nil {
		t.Fatal(err)
	}
	if gen := commit("e"); gen != 5 {
		t.Fatalf("after losing the counter and the log: generation %d, want 5", gen)
	}
	st, err := s.LoadState(ctx)
	if err != nil || st.Last == nil || st.Last.Generation != 5 || len(st.Entries) != 4 {
		t.Fatalf("load state: %+v, %v", st, err)
	}
}

// TestStateEntriesAreData: names that look like key or JSON syntax, and
// entries without a spec, come back as they were written.
func TestStateEntriesAreData(t *testing.T) {
	s := openStateStores(t, 1, backends.Options{})[0]
	ctx := t.Context()
	if _, err := s.TryLockApply(ctx, "alice", time.Minute); err != nil {
		t.Fatal(err)
	}
	odd := []string{`a:b`, `{x}:*`, `"}, "generation": 9`, "ünï"}
	var put []backends.InventoryEntry
	for _, n := range odd {
		put = append(put, backends.InventoryEntry{Address: spec.Address{Kind: spec.KindQueue, Name: n},
			Placement: backends.Placement{Backend: "r", BackendType: spec.TypeRedis}, Status: backends.StatusDraining})
	}
	if _, err := s.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: `h"1`, Summary: "ünï\n"}, put, nil); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Entries) != len(odd) {
		t.Fatalf("loaded %d entries, want %d", len(st.Entries), len(odd))
	}
	seen := map[string]bool{}
	for _, e := range st.Entries {
		seen[e.Address.Name] = true
		if e.Spec != nil || e.Generation != 1 || e.Status != backends.StatusDraining {
			t.Errorf("entry %+v", e)
		}
	}
	for _, n := range odd {
		if !seen[n] {
			t.Errorf("entry %q missing", n)
		}
	}
	if r, err := s.FindApply(ctx, `h"1`); err != nil || r.Summary != "ünï\n" || r.Generation != 1 {
		t.Fatalf("find apply: %+v, %v", r, err)
	}
	if _, err := s.CommitApply(ctx, "alice", backends.ApplyRecord{SpecHash: "h2"}, nil, []spec.Address{put[1].Address}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadState(ctx); err != nil || len(st.Entries) != len(odd)-1 {
		t.Fatalf("after removing one: %d entries, %v", len(st.Entries), err)
	}
}
