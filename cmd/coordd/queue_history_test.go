package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
)

// TestQueueWorkCountsAndAttemptErrors: after `coordd queue work --drain`
// processed two jobs and failed one twice (to the dead set), queue stats
// counts 2 processed and 2 failed in the last hour and day (added by the
// worker as it exits), and queue job shows both failed attempts, each with
// the command's stderr, its worker (host id and pid) and its time, in text
// and JSON; on every backend that holds queues.
func TestQueueWorkCountsAndAttemptErrors(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { queueWorkCountsAndAttemptErrors(t, typ) })
	}
}

func queueWorkCountsAndAttemptErrors(t *testing.T, typ string) {
	c := newCLI(t)
	const decl = "queues:\n  q: {visibility_timeout: 1m, max_attempts: 2, retry_backoff: 0s}\n"
	p := writeSpec(t, decl)
	if typ != "sqlite" {
		p = writeSpec(t, hostsBackend(t, typ)+decl)
	}
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	var bad string
	for _, payload := range []string{"ok 1", "bad", "ok 2"} {
		code, out, errs := c.run("", false, "queue", "push", "q", "-f", p, payload)
		if code != 0 {
			t.Fatalf("push: %d %s", code, errs)
		}
		if payload == "bad" {
			bad = strings.TrimSpace(out)
		}
	}
	script := `read -r p; case "$p" in bad) echo "cannot decode image" >&2; exit 3;; esac`
	if code, _, errs := c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", script); code != 0 {
		t.Fatalf("work: %d %s", code, errs)
	}

	st := queueStatsOf(t, c, p)
	want := backends.QueueCount{Processed: 2, Failed: 2}
	if st.LastHour != want || st.LastDay != want {
		t.Fatalf("queue stats: last hour %+v, last day %+v; want %+v", st.LastHour, st.LastDay, want)
	}
	code, out, errs := c.run("", false, "queue", "stats", "q", "-f", p)
	if code != 0 || !strings.Contains(out, "last hour 2 done, 2 failed") {
		t.Fatalf("queue stats: %d %s\n%s", code, errs, out)
	}

	code, out, errs = c.run("", false, "queue", "job", "q", bad, "-f", p, "--json")
	if code != 0 {
		t.Fatalf("queue job --json: %d %s", code, errs)
	}
	var j browsedJobJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("queue job --json: %v\n%s", err, out)
	}
	worker := regexp.MustCompile(`^[A-Za-z0-9._-]+:[0-9]+$`)
	if j.State != backends.JobDead || len(j.Errors) != 2 {
		t.Fatalf("job %s: state %s, errors %+v; want dead with 2 failed attempts", bad, j.State, j.Errors)
	}
	for i, e := range j.Errors {
		if e.Attempt != i+1 || !strings.Contains(e.Error, "cannot decode image") || !worker.MatchString(e.Worker) || e.At.IsZero() ||
			(i > 0 && e.At.Before(j.Errors[i-1].At)) {
			t.Fatalf("failed attempt %d = %+v; want attempt %d with the stderr, a host:pid worker and a time", i, e, i+1)
		}
	}
	code, out, errs = c.run("", false, "queue", "job", "q", bad, "-f", p)
	if code != 0 || !strings.Contains(out, "Failed attempts") || strings.Count(out, "cannot decode image") != 2 ||
		!strings.Contains(out, "attempt 2 at ") || !strings.Contains(out, " on "+j.Errors[1].Worker+":") {
		t.Fatalf("queue job: %d %s\n%s", code, errs, out)
	}
}
