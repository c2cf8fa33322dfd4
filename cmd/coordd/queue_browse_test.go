package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestQueueBrowseCommands: queue jobs lists each state a page at a time,
// by key too; queue job shows one job with its payload and last error on
// their own lines, escaped; queue cancel and run-now act on a job that has
// not run, refuse one in flight or dead (exit 1, nothing changed), and say
// what they did.
func TestQueueBrowseCommands(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 2, visibility_timeout: 1m, max_attempts: 1, retry_backoff: 0s}")
	push := func(args ...string) string {
		t.Helper()
		code, out, errs := c.run("", false, append([]string{"queue", "push", "q", "-f", p}, args...)...)
		if code != 0 {
			t.Fatalf("push %v: %d %s", args, code, errs)
		}
		return strings.TrimSpace(out)
	}
	deadID := push("will die")
	if code, _, errs := c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", "echo 'cannot decode\x1b[2J image' >&2; exit 3"); code != 0 {
		t.Fatalf("work: %d %s", code, errs)
	}
	a := push("--key", "k", "line one\nline two")
	b := push("plain")
	later := push("--delay", "1h", "--key", "k", "later")

	jobs := func(args ...string) []browsedJobJSON {
		t.Helper()
		code, out, errs := c.run("", false, append([]string{"queue", "jobs", "q", "-f", p, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("queue jobs %v: %d %s", args, code, errs)
		}
		var js []browsedJobJSON
		if err := json.Unmarshal([]byte(out), &js); err != nil {
			t.Fatalf("queue jobs json: %v\n%s", err, out)
		}
		return js
	}
	idsOf := func(js []browsedJobJSON) string {
		var s []string
		for _, j := range js {
			s = append(s, strconv.FormatInt(j.ID, 10))
		}
		return strings.Join(s, ",")
	}
	if got := idsOf(jobs()); got != a+","+b {
		t.Fatalf("ready jobs %s, want %s,%s", got, a, b)
	}
	if got := idsOf(jobs("--state", "ready", "--key", "k")); got != a {
		t.Fatalf("ready jobs of k: %s, want %s", got, a)
	}
	if got := idsOf(jobs("--state", "delayed")); got != later {
		t.Fatalf("delayed jobs %s, want %s", got, later)
	}
	if got := idsOf(jobs("--limit", "1", "--offset", "1")); got != b {
		t.Fatalf("second page %s, want %s", got, b)
	}
	dead := jobs("--state", "dead")
	if len(dead) != 1 || strconv.FormatInt(dead[0].ID, 10) != deadID || !strings.Contains(dead[0].LastError, "cannot decode") {
		t.Fatalf("dead jobs: %+v", dead)
	}
	code, out, _ := c.run("", false, "queue", "jobs", "q", "-f", p)
	if code != 0 || !strings.Contains(out, "READY SINCE") || !strings.Contains(out, "line one line two") {
		t.Fatalf("queue jobs table:\n%s", out)
	}
	if code, _, errs := c.run("", false, "queue", "jobs", "q", "-f", p, "--state", "lost"); code != 1 || !strings.Contains(errs, "ready, delayed, running, dead") {
		t.Fatalf("a bad --state: %d %s", code, errs)
	}

	code, out, _ = c.run("", false, "queue", "job", "q", a, "-f", p)
	if code != 0 || !strings.Contains(out, "State:") || !strings.Contains(out, "\nline one\nline two\n") {
		t.Fatalf("queue job %s:\n%s", a, out)
	}
	code, out, _ = c.run("", false, "queue", "job", "q", deadID, "-f", p)
	if code != 0 || !strings.Contains(out, "dead") || strings.Contains(out, "\x1b") || !strings.Contains(out, `\x1b[2J`) {
		t.Fatalf("queue job of the dead job must show its error escaped:\n%q", out)
	}
	if code, _, errs := c.run("", false, "queue", "job", "q", "999999", "-f", p); code != 1 || !strings.Contains(errs, "has no job 999999") {
		t.Fatalf("an absent job: %d %s", code, errs)
	}
	if code, _, errs := c.run("", false, "queue", "job", "q", "x1", "-f", p); code != 1 || !strings.Contains(errs, "positive integer") {
		t.Fatalf("a bad id: %d %s", code, errs)
	}

	// Refusals, then the actions.
	if code, _, errs := c.run("", false, "queue", "cancel", "q", deadID, "-f", p); code != 1 || !strings.Contains(errs, "no ready or delayed job") {
		t.Fatalf("cancel of a dead job: %d %s", code, errs)
	}
	if code, _, errs := c.run("", false, "queue", "run-now", "q", b, "-f", p); code != 1 || !strings.Contains(errs, "no delayed job") {
		t.Fatalf("run-now of a ready job: %d %s", code, errs)
	}
	if code, out, errs := c.run("", false, "queue", "cancel", "q", a, "-f", p); code != 0 || !strings.Contains(out, "canceled job "+a) {
		t.Fatalf("cancel: %d %s %s", code, out, errs)
	}
	if code, out, errs := c.run("", false, "queue", "run-now", "q", later, "-f", p); code != 0 || !strings.Contains(out, "ready now: job "+later) {
		t.Fatalf("run-now: %d %s %s", code, out, errs)
	}
	if got := idsOf(jobs()); got != b+","+later {
		t.Fatalf("ready jobs after the actions: %s, want %s,%s", got, b, later)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 2 || st.Dead != 1 {
		t.Fatalf("stats after the actions: %+v", st)
	}
}

// TestQueuePauseResumeCommands: queue pause needs a reason, records the
// host id and the reason once (a second pause keeps the first), and shows
// in queue stats and status, text and JSON; queue resume removes it and
// says what it removed; both refuse a queue not declared.
func TestQueuePauseResumeCommands(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 1}")
	if code, _, errs := c.run("", false, "queue", "pause", "q", "-f", p); code != 1 || !strings.Contains(errs, "--reason is required") {
		t.Fatalf("pause without a reason: %d %s", code, errs)
	}
	code, out, errs := c.run("", false, "queue", "pause", "q", "-f", p, "--reason", "INC-9 image service down", "--host-id", "web-3")
	if code != 0 || !strings.Contains(out, "queue.q paused by web-3 at ") || !strings.Contains(out, "INC-9 image service down") {
		t.Fatalf("pause: %d %s %s", code, out, errs)
	}
	code, out, _ = c.run("", false, "queue", "pause", "q", "-f", p, "--reason", "later", "--host-id", "web-4", "--json")
	var pj queuePauseJSON
	if err := json.Unmarshal([]byte(out), &pj); code != 0 || err != nil || pj.Changed || pj.Pause == nil || pj.Pause.Host != "web-3" {
		t.Fatalf("a second pause: %d %+v %v", code, pj, err)
	}
	if _, out, _ := c.run("", false, "queue", "stats", "q", "-f", p); !strings.Contains(out, "paused by web-3") {
		t.Fatalf("queue stats does not show the pause:\n%s", out)
	}
	if _, out, _ := c.run("", false, "queue", "stats", "q", "-f", p, "--json"); !strings.Contains(out, `"reason": "INC-9 image service down"`) {
		t.Fatalf("queue stats --json does not show the pause:\n%s", out)
	}
	if _, out, _ := c.run("", false, "status", "-f", p); !strings.Contains(out, "paused by web-3") {
		t.Fatalf("status does not show the pause:\n%s", out)
	}
	code, out, _ = c.run("", false, "queue", "resume", "q", "-f", p)
	if code != 0 || !strings.Contains(out, "removed the pause by web-3") {
		t.Fatalf("resume: %d %s", code, out)
	}
	if code, out, _ := c.run("", false, "queue", "resume", "q", "-f", p); code != 0 || !strings.Contains(out, "not paused; nothing to resume") {
		t.Fatalf("a second resume: %d %s", code, out)
	}
	if _, out, _ := c.run("", false, "queue", "stats", "q", "-f", p); strings.Contains(out, "paused") {
		t.Fatalf("queue stats shows a pause after the resume:\n%s", out)
	}
	if code, _, errs := c.run("", false, "queue", "pause", "nope", "-f", p, "--reason", "x"); code != 1 || !strings.Contains(errs, "not declared") {
		t.Fatalf("pause of an undeclared queue: %d %s", code, errs)
	}
}
