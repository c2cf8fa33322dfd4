package backends

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/coordd/coordd/spec"
)

// NoticeRetention is how long the record of a notified event is kept.
// The leader looks for events no older than half of it (notify), so a
// record is always there while its event may be seen again.
const NoticeRetention = 7 * 24 * time.Hour

// Notices is the cluster's record of failure events whose on_failure hook
// was delivered. The leader marks an event once its delivery ended, and
// any later leader skips marked events: one delivery per event across the
// cluster, and a second one only when a leader died in the middle of one.
// An id is any string (the stores keep its NoticeKey); one that starts
// with NoticeKeep is never pruned.
type Notices interface {
	// MarkNotice records id at backend now unless it is recorded already,
	// and returns the time it was first recorded.
	MarkNotice(ctx context.Context, id string) (time.Time, error)
	// NoticesMarked returns which of ids are recorded, with their times.
	NoticesMarked(ctx context.Context, ids []string) (map[string]time.Time, error)
	// PruneNotices deletes the records older than olderThan of backend
	// time, except kept ones, and returns how many it deleted.
	PruneNotices(ctx context.Context, olderThan time.Duration) (int, error)
}

// NoticeKeep starts the id of a record that PruneNotices keeps: the time
// a hook was first declared, which must outlive the events' records.
const NoticeKeep = "keep/"

// NoticeKey is the fixed-width key a store keeps for a notice id: the hex
// SHA-256 of the id, so that ids of any length and content fit one
// column or key.
func NoticeKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// HookDeclared is the id of the kept record of when on_failure hook h of
// object addr, as declared, was first applied (or first seen by a leader,
// when the leader's spec was never applied). Failure events from before it
// are not notified: adding a hook does not page for last month's
// failures, and changing one does not page again. Apply records it before
// it stores the object, so that every run of the object as declared comes
// after it.
func HookDeclared(addr string, h *spec.Hook) string {
	raw, err := json.Marshal(h)
	if err != nil {
		panic("backends: hook: " + err.Error()) // plain data
	}
	sum := sha256.Sum256(raw)
	return NoticeKeep + "hook/" + addr + "/" + hex.EncodeToString(sum[:8])
}
