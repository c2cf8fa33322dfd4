package backends

import (
	"errors"
	"slices"
	"testing"
)

// TestClaimJobsErrors: a claim without an owner or with max under 1 is
// refused with the message every store gives, and a store's error says
// which queue and owner.
func TestClaimJobsErrors(t *testing.T) {
	if err := CheckClaimJobs("q", "o", 1); err != nil {
		t.Fatalf("a valid claim: %v", err)
	}
	for _, c := range []struct {
		owner string
		max   int
		want  string
	}{
		{"", 1, `claim from queue "q": empty owner`},
		{"o", 0, `claim from queue "q": max 0: must be at least 1`},
	} {
		if err := CheckClaimJobs("q", c.owner, c.max); err == nil || err.Error() != c.want {
			t.Errorf("CheckClaimJobs(%q, %d) = %v, want %s", c.owner, c.max, err, c.want)
		}
	}
	err := ClaimJobsError("q", "o", ErrNotFound)
	if !errors.Is(err, ErrNotFound) || err.Error() != `claim from queue "q" as "o": not found` {
		t.Errorf("ClaimJobsError = %v", err)
	}
	if err := ClaimsError(3, ErrLost); !errors.Is(err, ErrLost) || err.Error() != "claim 3 cron occurrences: lease lost" {
		t.Errorf("ClaimsError = %v", err)
	}
}

// TestClaimOrder: the higher priority first, then the lower id, whatever
// order the jobs come in.
func TestClaimOrder(t *testing.T) {
	jobs := []Job{{ID: 4}, {ID: 2, Priority: -1}, {ID: 3, Priority: 5}, {ID: 1}, {ID: 5, Priority: 5}}
	slices.SortFunc(jobs, ClaimOrder)
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	if want := []int64{3, 5, 1, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("sorted %v, want %v", got, want)
	}
	if ClaimOrder(Job{ID: 7, Priority: 1}, Job{ID: 7, Priority: 1}) != 0 {
		t.Fatal("a job does not compare equal to itself")
	}
}
