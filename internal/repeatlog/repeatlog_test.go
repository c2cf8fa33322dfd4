package repeatlog_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/internal/repeatlog"
)

// TestRepeatsAreCountedNotLogged: a failure every second for 150 s logs
// the first one and then one line a minute with the count of the others,
// and the recovery once with the total; a new failure after the recovery
// is logged at once again.
func TestRepeatsAreCountedNotLogged(t *testing.T) {
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info, DisableTime: true})
	l := repeatlog.New(log, time.Minute)
	now := time.Unix(1_800_000_000, 0)
	l.SetClock(func() time.Time { return now })
	for range 150 {
		l.Warn("lease", "reading the leader lease failed", "error", "connection refused")
		now = now.Add(time.Second)
	}
	l.Recovered("lease", "reading the leader lease works again")
	l.Recovered("lease", "reading the leader lease works again") // nothing to end
	l.Warn("lease", "reading the leader lease failed", "error", "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`[WARN]  reading the leader lease failed: error="connection refused"`,
		`[WARN]  reading the leader lease failed: error="connection refused" repeated=59 in_last=1m0s failing_for=1m0s`,
		`[WARN]  reading the leader lease failed: error="connection refused" repeated=59 in_last=1m0s failing_for=2m0s`,
		`[INFO]  reading the leader lease works again: failures=150 failed_for=2m30s`,
		`[WARN]  reading the leader lease failed: error="connection refused"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

// TestKeysAreApart: each key has its own count.
func TestKeysAreApart(t *testing.T) {
	var buf bytes.Buffer
	l := repeatlog.New(hclog.New(&hclog.LoggerOptions{Output: &buf, DisableTime: true}), time.Minute)
	l.Warn("a", "a failed")
	l.Warn("b", "b failed")
	l.Warn("a", "a failed")
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Errorf("%d lines, want 2 (a and b once each):\n%s", got, buf.String())
	}
}
