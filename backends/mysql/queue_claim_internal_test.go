package mysql

import (
	"database/sql"
	"testing"

	"github.com/coordd/coordd/backends"
)

// TestClaimReportStartsOverWhenSentAgain: a claim script sent again after
// it failed past its read-back (a stray KILL QUERY at COMMIT) reads its
// status row again, and only the jobs of that last run are handed out:
// the first run's may not have been committed.
func TestClaimReportStartsOverWhenSentAgain(t *testing.T) {
	rep := claimReport{status: 1, byOwner: map[string][]backends.Job{}}
	rep.add(-1, backends.Job{}, 100, sql.NullInt64{})
	rep.add(7, backends.Job{ID: 7, Owner: "a"}, 0, sql.NullInt64{})
	rep.add(8, backends.Job{ID: 8, Owner: "b"}, 0, sql.NullInt64{})
	// Sent again.
	rep.add(-1, backends.Job{}, 200, sql.NullInt64{Int64: 150, Valid: true})
	rep.add(9, backends.Job{ID: 9, Owner: "a"}, 0, sql.NullInt64{})
	if rep.status != -1 || rep.now != 200 || rep.earliest.Int64 != 150 {
		t.Errorf("report status %d now %d earliest %v, want the second run's", rep.status, rep.now, rep.earliest)
	}
	if len(rep.byOwner) != 1 || len(rep.byOwner["a"]) != 1 || rep.byOwner["a"][0].ID != 9 {
		t.Errorf("jobs by owner %v, want job 9 for a only", rep.byOwner)
	}
}
