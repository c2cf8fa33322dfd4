package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestStatusHosts: the hosts section from a registry read: the leader
// marked by its run id, a host past three missed heartbeats shown stale
// and, like a stopped one, left out of the spec hash comparison, and the
// warning naming which live host runs which hash.
func TestStatusHosts(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	applied, other, old := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	rec := func(host, hash string, ago time.Duration, stopped bool) backends.HostRecord {
		return backends.HostRecord{Host: host, RunID: host + "/1/x", Version: "0.1.0", SpecHash: hash,
			HeartbeatEvery: 30 * time.Second, Stopped: stopped, StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-ago)}
	}
	r := &statusReport{Leader: &backends.Term{Holder: "h1/1/x", Term: 3}, Applied: &backends.ApplyRecord{SpecHash: applied},
		Hosts: []hostStatus{}, HostSpecHashes: []hashGroup{}}
	r.addHosts(backends.Hosts{Now: now, Hosts: []backends.HostRecord{
		rec("h1", applied, 5*time.Second, false),
		rec("h2", other, 20*time.Second, false),
		rec("h3", other, 89*time.Second, false),
		rec("h4", old, 91*time.Second, false), // three periods and a second: stale
		rec("h5", old, time.Minute, true),
	}})
	want := map[string]string{"h1": "live", "h2": "live", "h3": "live", "h4": "stale", "h5": "stopped"}
	for _, h := range r.Hosts {
		if h.State != want[h.Host] || h.Leader != (h.Host == "h1") || h.RunsApplied != (h.Host == "h1") {
			t.Errorf("%s: %+v", h.Host, h)
		}
	}
	if r.Hosts[1].LastSeenAgo != 20 || r.Hosts[1].HeartbeatEvery != 30 {
		t.Errorf("h2 ages: %+v", r.Hosts[1])
	}
	if len(r.HostSpecHashes) != 2 || !r.HostSpecHashes[0].Applied || strings.Join(r.HostSpecHashes[1].Hosts, ",") != "h2,h3" {
		t.Errorf("host_spec_hashes %+v", r.HostSpecHashes)
	}
	wantWarn := "live hosts run 2 different spec hashes (a rollout in flight, or a stale checkout): aaaaaaaaaaaa (applied) on h1; bbbbbbbbbbbb on h2, h3"
	if r.HostsWarning != wantWarn {
		t.Errorf("warning %q\nwant    %q", r.HostsWarning, wantWarn)
	}
	var out bytes.Buffer
	r.writeHosts(&cliEnv{stdout: &out})
	for _, l := range []string{
		"Hosts:     3 live, 1 stale, 1 stopped",
		"h1  leader  live",
		"h4          stale    version 0.1.0  spec cccccccccccc  not applied  started 2026-11-24T11:00:00Z  seen 1m31s ago",
		"Warning:   " + wantWarn,
	} {
		if !strings.Contains(out.String(), l) {
			t.Errorf("text lacks %q:\n%s", l, out.String())
		}
	}

	// One hash among live hosts: no warning.
	r = &statusReport{Hosts: []hostStatus{}, HostSpecHashes: []hashGroup{}}
	r.addHosts(backends.Hosts{Now: now, Hosts: []backends.HostRecord{rec("h1", old, time.Second, false), rec("h2", other, time.Hour, false)}})
	if r.HostsWarning != "" || len(r.HostSpecHashes) != 1 {
		t.Errorf("one live hash: warning %q, groups %+v", r.HostsWarning, r.HostSpecHashes)
	}
}
