package backends

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/spec"
)

// The rules of Queues.Claim that every store follows, written once so that
// the stores agree and their errors read alike.

// CheckClaimJobs checks a claim of jobs before anything is sent: an owner,
// and a max of at least 1.
func CheckClaimJobs(queue, owner string, max int) error {
	switch {
	case owner == "":
		return fmt.Errorf("claim from queue %q: empty owner", queue)
	case max < 1:
		return fmt.Errorf("claim from queue %q: max %d: must be at least 1", queue, max)
	}
	return nil
}

// ClaimOrder compares two jobs in claim order (Queues.Claim): the higher
// priority first, then the older (lower id) first. A store sorts the jobs
// of one claim with it, which come back from its database in no order.
func ClaimOrder(a, b Job) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// ClaimJobsError is a claim's error: err, saying which queue and owner.
func ClaimJobsError(queue, owner string, err error) error {
	return fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
}

// PushOnceRetention is how long a store keeps the record of a PushOnce:
// far beyond any retry of the push (a cron task's run lease and backoff).
const PushOnceRetention = 7 * 24 * time.Hour

// CheckPushOnce checks a once key: not empty, at most spec.MaxKeyLen
// bytes of text as job keys are (spec.CheckKey).
func CheckPushOnce(once string) error {
	if once == "" {
		return errors.New("push once: empty once key")
	}
	return spec.CheckKey(once)
}
