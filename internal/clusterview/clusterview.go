// Package clusterview holds the rules by which `coordd status` and the web
// dashboard read the cluster, so that both tell an operator the same thing:
// which host record is the leader's, and what a local spec hash that is not
// the applied one means.
package clusterview

import (
	"context"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
)

// IsLeader reports whether h is the record of the daemon that holds term
// t (nil: nobody leads). The holder is the daemon's run id; a record from
// an older binary may carry another, so then the host id part of the
// holder decides, for a live record.
func IsLeader(t *backends.Term, h backends.HostRecord, now time.Time) bool {
	if t == nil {
		return false
	}
	holderHost, _, _ := strings.Cut(t.Holder, "/")
	return t.Holder == h.RunID || (holderHost == h.Host && h.State(now) == backends.HostLive)
}

// HashWarning explains a local spec hash that is not the applied one:
// nothing applied yet, a stale checkout (the hash was applied once and
// superseded), or a rollout in flight. It is "" when they are the same.
func HashWarning(ctx context.Context, ss backends.Cluster, last *backends.ApplyRecord, local string) string {
	switch {
	case last == nil:
		return "nothing applied yet"
	case last.SpecHash == local:
		return ""
	}
	if _, err := ss.FindApply(ctx, local); err == nil {
		return "the local spec was applied before and superseded: a stale checkout"
	}
	return "the local spec differs from the applied one: a rollout in flight, or an apply to run"
}
