package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestCronClaimCallAndTheSharedPath: a batch of scheduled claims made by
// one call answers as the shared batch does (a claim per task, a second
// claim of one time refused with ErrConflict, fencing numbers that grow),
// and a schema without the function takes the shared path.
func TestCronClaimCallAndTheSharedPath(t *testing.T) {
	ctx := t.Context()
	a, b := twoHosts(t, backends.Options{})
	def := json.RawMessage(`{"schedule":"* * * * *","command":{"argv":["job"]}}`)
	at := time.Now().Add(-time.Second).Truncate(time.Second)
	check := func(t *testing.T, prefix string) {
		t.Helper()
		var reqs []backends.ClaimRequest
		for i := range 5 {
			name := fmt.Sprintf("%s%d", prefix, i)
			if err := a.PutCron(ctx, name, def, at, true); err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, backends.ClaimRequest{Task: name, ScheduledAt: at, Next: at.Add(time.Minute), Attempt: 1,
				Owner: "o" + name, Host: "a", Lease: time.Minute, Exclusive: true})
		}
		res, err := a.ClaimOccurrences(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil || r.Occurrence.Task != reqs[i].Task || r.Occurrence.Fencing <= 0 || !r.Occurrence.ExpiresAt.After(r.Occurrence.StartedAt) {
				t.Errorf("claim %d: %+v", i, r)
			}
		}
		again, err := b.ClaimOccurrences(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range again {
			if !errors.Is(r.Err, backends.ErrConflict) {
				t.Errorf("second claim %d = %v, want ErrConflict", i, r.Err)
			}
		}
	}
	t.Run("call", func(t *testing.T) { check(t, "call") })
	execSQL(t, a, `DROP FUNCTION `+a.Table("cron_claim"))
	t.Run("shared", func(t *testing.T) { check(t, "shared") })
}
