package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// TestStatusListsWaiters: coordd status and coordd sem status show a
// semaphore's waiters, the count and one row per waiter in line order with
// host, pid and since (and the line in --json), never an owner token.
func TestStatusListsWaiters(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "semaphores:\n  s: {limit: 1}\n")
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := spec.Load(filepath.Dir(p), spec.LoadOptions{DataDir: c.dataDir, Getenv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	e, err := reconcile.Open(ctx, s, reconcile.OpenOptions{Version: "0.1.0", Host: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b := e.Backends[s.Cluster.Backend]
	if _, err := b.Semaphores().TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: "holder-token", Host: "web-1", PID: 10, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []backends.AcquireRequest{
		{Owner: "secret-token-a", Host: "web-2", PID: 2001, Lease: time.Minute},
		{Owner: "secret-token-b", Host: "web-3", PID: 3001, Lease: time.Minute},
	} {
		if err := b.Semaphores().Waiters().EnterWait(ctx, backends.SemRef{Name: "s"}, w); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := c.run("", false, "status", "-f", p)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	i2, i3 := strings.Index(out, "waiting 1"), strings.Index(out, "waiting 2")
	if !strings.Contains(out, "waiters 2") || i2 < 0 || i3 < i2 ||
		!strings.Contains(out[i2:i3], "host web-2 pid 2001") || !strings.Contains(out[i3:], "host web-3 pid 3001") ||
		!strings.Contains(out[i2:], "since 20") {
		t.Fatalf("status does not list the line in order:\n%s", out)
	}
	if strings.Contains(out, "secret-token") {
		t.Fatalf("status shows an owner token:\n%s", out)
	}

	_, out, _ = c.run("", false, "status", "-f", p, "--json")
	var r struct {
		Objects []struct {
			Address string            `json:"address"`
			Waiters *int              `json:"waiters"`
			Line    []backends.Waiter `json:"line"`
		} `json:"objects"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(r.Objects) != 1 || r.Objects[0].Waiters == nil || *r.Objects[0].Waiters != 2 || len(r.Objects[0].Line) != 2 ||
		r.Objects[0].Line[0].Host != "web-2" || r.Objects[0].Line[1].PID != 3001 || r.Objects[0].Line[0].Since.IsZero() {
		t.Fatalf("status --json line: %s", out)
	}
	if strings.Contains(out, "secret-token") {
		t.Fatalf("status --json shows an owner token:\n%s", out)
	}

	// sem status lists the same line, text and JSON.
	code, out, errs = c.run("", false, "sem", "status", "s", "-f", p)
	i2, i3 = strings.Index(out, "waiting 1"), strings.Index(out, "waiting 2")
	if code != 0 || i2 < 0 || i3 < i2 || !strings.Contains(out[i2:i3], "host web-2 pid 2001") ||
		!strings.Contains(out[i3:], "host web-3 pid 3001") || strings.Contains(out, "secret-token") {
		t.Fatalf("sem status does not list the line in order: %d %s\n%s", code, errs, out)
	}
	_, out, _ = c.run("", false, "sem", "status", "s", "-f", p, "--json")
	var ss []struct {
		Waiters int               `json:"waiters"`
		Line    []backends.Waiter `json:"line"`
	}
	if err := json.Unmarshal([]byte(out), &ss); err != nil || len(ss) != 1 || ss[0].Waiters != 2 || len(ss[0].Line) != 2 ||
		ss[0].Line[0].Host != "web-2" || strings.Contains(out, "secret-token") {
		t.Fatalf("sem status --json line (%v): %s", err, out)
	}
}
