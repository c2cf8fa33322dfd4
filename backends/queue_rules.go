package backends

import "fmt"

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

// ClaimJobsError is a claim's error: err, saying which queue and owner.
func ClaimJobsError(queue, owner string, err error) error {
	return fmt.Errorf("claim from queue %q as %q: %w", queue, owner, err)
}
