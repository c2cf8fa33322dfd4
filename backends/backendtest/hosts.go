package backendtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testHostRegistry checks the host registry: upserts keyed by host id,
// times from the backend's clock, the start time kept per daemon process,
// the prune, names as data, and the cheap read of the last apply.
func testHostRegistry(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"Empty", testHostsEmpty},
		{"Heartbeat", testHostsHeartbeat},
		{"TwoHandles", testHostsTwoHandles},
		{"Prune", testHostsPrune},
		{"NamesAreData", testHostsNames},
		{"LastApply", testHostsLastApply},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

// freshHosts creates a fresh store and returns its registry and a function
// that opens another handle's registry.
func freshHosts(t *testing.T, h Harness) (backends.Backend, backends.Cluster, func() backends.Cluster) {
	t.Helper()
	b, open := fresh(t, h)
	return b, clusterOf(t, b), func() backends.Cluster { return clusterOf(t, open()) }
}

// listHosts reads the registry and checks the invariants every read has.
func listHosts(t *testing.T, b backends.Backend, r backends.Cluster) backends.Hosts {
	t.Helper()
	before, err := b.Now(t.Context())
	ok(t, err, "now")
	hs, err := r.ListHosts(t.Context())
	ok(t, err, "list hosts")
	after, err := b.Now(t.Context())
	ok(t, err, "now")
	if hs.Now.Before(before) || hs.Now.After(after) || hs.Now.Location() != time.UTC {
		t.Fatalf("ListHosts Now = %v, want backend time in UTC between %v and %v", hs.Now, before, after)
	}
	if !slices.IsSortedFunc(hs.Hosts, func(a, b backends.HostRecord) int { return strings.Compare(a.Host, b.Host) }) {
		t.Fatalf("hosts not sorted by host id: %+v", hs.Hosts)
	}
	return hs
}

// find returns host's record.
func find(t *testing.T, hs backends.Hosts, host string) backends.HostRecord {
	t.Helper()
	for _, r := range hs.Hosts {
		if r.Host == host {
			return r
		}
	}
	t.Fatalf("host %q not listed: %+v", host, hs.Hosts)
	return backends.HostRecord{}
}

func hostRec(host, run, hash string) backends.HostRecord {
	return backends.HostRecord{Host: host, RunID: run, PID: 4242, Version: "0.1.0", SpecHash: hash, HeartbeatEvery: 30 * time.Second}
}

func testHostsEmpty(t *testing.T, h Harness) {
	open := h.New(t)
	raw := open()
	if _, isMigrator := raw.(backends.Migrator); isMigrator {
		hs := listHosts(t, raw, clusterOf(t, raw))
		if len(hs.Hosts) != 0 {
			t.Errorf("never migrated: hosts %+v, want none", hs.Hosts)
		}
		last, err := clusterOf(t, raw).LastApply(t.Context())
		ok(t, err, "last apply of a store never migrated")
		if last != nil {
			t.Errorf("never migrated: last apply %+v, want nil", last)
		}
	}
	b, r, _ := freshHosts(t, h)
	if hs := listHosts(t, b, r); len(hs.Hosts) != 0 {
		t.Errorf("fresh store: hosts %+v, want none", hs.Hosts)
	}
	n, err := r.PruneHosts(t.Context(), time.Hour)
	ok(t, err, "prune an empty registry")
	if n != 0 {
		t.Errorf("prune of an empty registry deleted %d", n)
	}
}

func testHostsHeartbeat(t *testing.T, h Harness) {
	ctx := t.Context()
	b, r, _ := freshHosts(t, h)
	before, err := b.Now(ctx)
	ok(t, err, "now")
	rec := hostRec("web1", "web1/100/aa", "hash-a")
	// The backend sets both times: what the caller passes is ignored.
	rec.StartedAt, rec.LastSeen = time.Unix(1, 0), time.Unix(2, 0)
	ok(t, r.Heartbeat(ctx, rec), "first heartbeat")
	hs := listHosts(t, b, r)
	if len(hs.Hosts) != 1 {
		t.Fatalf("hosts %+v, want web1 only", hs.Hosts)
	}
	first := hs.Hosts[0]
	if first.Host != "web1" || first.RunID != rec.RunID || first.PID != 4242 || first.Version != "0.1.0" ||
		first.SpecHash != "hash-a" || first.HeartbeatEvery != 30*time.Second || first.Stopped {
		t.Fatalf("record %+v, want the fields of %+v", first, rec)
	}
	if first.LastSeen.Before(before) || first.LastSeen.After(hs.Now) || !first.StartedAt.Equal(first.LastSeen) {
		t.Fatalf("record times started %v, last seen %v; want both the backend time of the heartbeat (after %v, not after %v)",
			first.StartedAt, first.LastSeen, before, hs.Now)
	}
	if first.State(hs.Now) != backends.HostLive {
		t.Errorf("state %q right after a heartbeat, want live", first.State(hs.Now))
	}

	// The same process again, with a new spec: last seen moves, the start
	// time stays.
	waitPast(t, b, first.LastSeen)
	rec.SpecHash = "hash-b"
	ok(t, r.Heartbeat(ctx, rec), "second heartbeat")
	second := find(t, listHosts(t, b, r), "web1")
	if !second.LastSeen.After(first.LastSeen) || !second.StartedAt.Equal(first.StartedAt) || second.SpecHash != "hash-b" {
		t.Fatalf("after a second heartbeat: %+v; want last seen after %v, started %v, hash-b", second, first.LastSeen, first.StartedAt)
	}

	// A new process on the host id (a restart): the start time moves.
	waitPast(t, b, second.LastSeen)
	rec.RunID, rec.PID = "web1/200/bb", 200
	ok(t, r.Heartbeat(ctx, rec), "heartbeat of a restarted daemon")
	third := find(t, listHosts(t, b, r), "web1")
	if !third.StartedAt.After(second.LastSeen) || !third.StartedAt.Equal(third.LastSeen) || third.RunID != rec.RunID || third.PID != 200 {
		t.Fatalf("after a restart: %+v; want run %s, pid 200, started = last seen, after %v", third, rec.RunID, second.LastSeen)
	}

	// A clean shutdown marks the record stopped.
	rec.Stopped = true
	ok(t, r.Heartbeat(ctx, rec), "last heartbeat")
	hs = listHosts(t, b, r)
	stopped := find(t, hs, "web1")
	if !stopped.Stopped || stopped.State(hs.Now) != backends.HostStopped || !stopped.StartedAt.Equal(third.StartedAt) {
		t.Fatalf("after the last heartbeat: %+v, want stopped with the same start time", stopped)
	}
	if len(hs.Hosts) != 1 {
		t.Fatalf("hosts %+v: one host id must be one record", hs.Hosts)
	}
}

func testHostsTwoHandles(t *testing.T, h Harness) {
	ctx := t.Context()
	b, r1, open := freshHosts(t, h)
	r2 := open()
	ok(t, r1.Heartbeat(ctx, hostRec("web2", "web2/1/x", "hash-a")), "heartbeat web2")
	ok(t, r2.Heartbeat(ctx, hostRec("web1", "web1/1/y", "hash-b")), "heartbeat web1 from another handle")
	ok(t, r2.Heartbeat(ctx, hostRec("web3", "web3/1/z", "hash-a")), "heartbeat web3 from another handle")
	hs := listHosts(t, b, r1)
	var got []string
	for _, r := range hs.Hosts {
		got = append(got, r.Host)
	}
	if !slices.Equal(got, []string{"web1", "web2", "web3"}) {
		t.Fatalf("hosts %v, want web1, web2, web3", got)
	}
	live := hs.LiveSpecHashes()
	if len(live) != 2 || !slices.Equal(live["hash-a"], []string{"web2", "web3"}) || !slices.Equal(live["hash-b"], []string{"web1"}) {
		t.Errorf("live spec hashes %v", live)
	}
}

func testHostsPrune(t *testing.T, h Harness) {
	ctx := t.Context()
	b, r, _ := freshHosts(t, h)
	ok(t, r.Heartbeat(ctx, hostRec("old", "old/1/a", "h")), "heartbeat old")
	old := find(t, listHosts(t, b, r), "old")
	// Three seconds of backend time later a second host beats; a prune
	// of what is older than two seconds takes the first one only (the
	// margin is for a slow machine between the heartbeat and the prune).
	waitPast(t, b, old.LastSeen.Add(3*time.Second))
	ok(t, r.Heartbeat(ctx, hostRec("new", "new/1/b", "h")), "heartbeat new")
	n, err := r.PruneHosts(ctx, 2*time.Second)
	ok(t, err, "prune")
	hs := listHosts(t, b, r)
	if n != 1 || len(hs.Hosts) != 1 || hs.Hosts[0].Host != "new" {
		t.Fatalf("prune deleted %d, left %+v; want 1 deleted, new left", n, hs.Hosts)
	}
	// The pruned host comes back with its next heartbeat.
	ok(t, r.Heartbeat(ctx, hostRec("old", "old/1/a", "h")), "heartbeat old again")
	if hs := listHosts(t, b, r); len(hs.Hosts) != 2 {
		t.Fatalf("hosts %+v, want old and new", hs.Hosts)
	}
	n, err = r.PruneHosts(ctx, time.Hour)
	ok(t, err, "prune nothing")
	if n != 0 {
		t.Errorf("a prune of hour-old records deleted %d live ones", n)
	}
}

// testHostsNames: host ids are limited (spec.CheckHostID), so odd ones
// are refused before anything is written; the other fields are free text,
// bound as data.
func testHostsNames(t *testing.T, h Harness) {
	ctx := t.Context()
	b, r, _ := freshHosts(t, h)
	for _, host := range []string{"", "Web 1", "x'; DROP TABLE hosts; --", "{global}:hosts", "*", "é", "a\n\x1b[2J", strings.Repeat("h", spec.MaxHostIDLen+1)} {
		wantErr(t, r.Heartbeat(ctx, hostRec(host, "run", "hash")), spec.ErrInvalidHostID, fmt.Sprintf("heartbeat %q", host))
	}
	if hs := listHosts(t, b, r); len(hs.Hosts) != 0 {
		t.Fatalf("refused heartbeats wrote %+v", hs.Hosts)
	}
	odd := []string{"x'; DROP TABLE hosts; --", "{global}:hosts", "*", "é/ü:1", `a"b\c`}
	hosts := []string{"web1", "WEB1", "Web-1.example_2", strings.Repeat("h", spec.MaxHostIDLen), "0"}
	for i, o := range odd {
		rec := hostRec(hosts[i], o+`/"run"/`+string(rune('a'+i)), `spec "hash" {`+o+`}`)
		rec.Version = `v'"\` + o
		ok(t, r.Heartbeat(ctx, rec), "heartbeat "+hosts[i])
	}
	hs := listHosts(t, b, r)
	if len(hs.Hosts) != len(odd) {
		t.Fatalf("hosts %+v, want %d", hs.Hosts, len(odd))
	}
	for i, o := range odd {
		got := find(t, hs, hosts[i])
		if got.RunID != o+`/"run"/`+string(rune('a'+i)) || got.SpecHash != `spec "hash" {`+o+`}` || got.Version != `v'"\`+o {
			t.Errorf("record of %q came back as %+v", hosts[i], got)
		}
	}
}

func testHostsLastApply(t *testing.T, h Harness) {
	ctx := t.Context()
	b, r, _ := freshHosts(t, h)
	last, err := r.LastApply(ctx)
	ok(t, err, "last apply of a fresh store")
	if last != nil {
		t.Fatalf("fresh store: last apply %+v, want nil", last)
	}
	ss := clusterOf(t, b)
	for i, hash := range []string{"hash-1", "hash-2", "hash-1"} {
		unlock, err := ss.TryLockApply(ctx, "owner", time.Minute)
		ok(t, err, "lock")
		gen, err := ss.CommitApply(ctx, "owner", backends.ApplyRecord{SpecHash: hash, Host: "web1", Summary: "s"}, nil, nil)
		ok(t, err, "commit")
		ok(t, unlock(ctx), "unlock")
		last, err := r.LastApply(ctx)
		ok(t, err, "last apply")
		if last == nil || last.SpecHash != hash || last.Generation != gen || last.Host != "web1" || last.At.IsZero() {
			t.Fatalf("after apply %d: last apply %+v, want %s generation %d", i+1, last, hash, gen)
		}
	}
}
