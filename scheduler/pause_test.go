package scheduler

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// TestPauseThenCatchUp pauses a task whose next_exec is 10 times in the
// past, lets a scheduler lead (a task that is not paused, due as well,
// runs: a pass happened) and checks that the paused task ran nothing and
// kept its next_exec; once resumed, the 10 missed times follow catch_up
// as after a downtime.
func TestPauseThenCatchUp(t *testing.T) {
	for _, tc := range []struct {
		mode string
		skip string // reason of the one skip record ("" none)
		runs int    // the newest runs
	}{
		{spec.CatchUpOnce, "catch_up once: skipped 9 missed", 1},
		{spec.CatchUpAll, "", 10},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			path, log, times := catchUpFixture(t, tc.mode, 100)
			st := openStore(t, path)
			if _, _, err := st.PauseCron(t.Context(), "job", "ops-1", "incident 7"); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(filepath.Dir(path), "marker")
			put(t, st, "other", newDef("@every 1h", "echo ran >> "+marker), now(t, st).Add(-time.Second))

			h := start(t, path, "a")
			waitRuns(t, st, "other", 20*time.Second, func(r []backends.Run) bool { return finished(r) >= 1 })
			if runs := history(t, st, "job"); len(runs) != 0 {
				t.Fatalf("paused task ran while another due task ran:\n%s", dump(runs))
			}
			m, err := st.ObserveCrons(t.Context(), []string{"job"})
			if err != nil {
				t.Fatal(err)
			}
			if !m["job"].NextExec.Equal(times[0]) || m["job"].Paused == nil {
				t.Fatalf("paused task: next_exec %v pause %+v, want %v kept and the pause", m["job"].NextExec, m["job"].Paused, times[0])
			}

			if _, err := st.ResumeCron(t.Context(), "job"); err != nil {
				t.Fatal(err)
			}
			h.s.Wake()
			want := tc.runs
			if tc.skip != "" {
				want++
			}
			runs := waitRuns(t, st, "job", 20*time.Second, func(r []backends.Run) bool { return finished(r) >= want })
			var wantLog []string
			for _, at := range times[len(times)-tc.runs:] {
				wantLog = append(wantLog, at.UTC().Format(scheduledAtLayout))
			}
			if got := lines(t, log); strings.Join(got, " ") != strings.Join(wantLog, " ") {
				t.Fatalf("ran %v after the resume, want %v in order", got, wantLog)
			}
			if tc.skip != "" {
				if r := runs[0]; r.Status != backends.RunSkipped || r.Error != tc.skip || !r.ScheduledAt.Equal(times[0]) {
					t.Fatalf("skip record %+v, want %q at %v", r, tc.skip, times[0])
				}
			}
		})
	}
}
