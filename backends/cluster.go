package backends

import (
	"context"
	"time"

	"github.com/coordd/coordd/spec"
)

// HostRetention is how long a host's record outlives its last heartbeat.
// Daemons prune older records (PruneHosts), so a decommissioned server
// vanishes from `coordd status` a day after it last ran.
const HostRetention = 24 * time.Hour

// Host states, derived from a record and the backend's clock (HostRecord.State).
const (
	// HostLive: heartbeats arrive on time.
	HostLive = "live"
	// HostStale: no heartbeat for StaleAfter(HeartbeatEvery): the daemon
	// died, hangs, or cannot reach the backend.
	HostStale = "stale"
	// HostStopped: the daemon shut down cleanly (its last heartbeat said so).
	HostStopped = "stopped"
)

// HostRecord is one daemon's heartbeat in the cluster backend. It is
// informational only: status and metrics read it, nothing decides
// correctness from it (leases, claims and the apply lock do).
type HostRecord struct {
	// Host is the daemon's --host-id: one record per host id.
	Host string `json:"host"`
	// RunID identifies one daemon process (its leader holder id,
	// host/pid/nonce). A heartbeat with a new RunID restarts StartedAt.
	RunID    string `json:"run_id"`
	PID      int    `json:"pid"`
	Version  string `json:"version"`
	SpecHash string `json:"spec_hash"`
	// HeartbeatEvery is the daemon's heartbeat period; readers derive
	// staleness from it, so no reader needs the daemon's configuration.
	HeartbeatEvery time.Duration `json:"heartbeat_every"`
	// Stopped: the daemon's last heartbeat was sent at a clean shutdown.
	Stopped bool `json:"stopped,omitempty"`
	// StartedAt is the backend time of RunID's first heartbeat, LastSeen
	// of its latest; the backend sets both from its own clock and ignores
	// what the caller passes.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
}

// StaleAfter is how long a host may go without a heartbeat before it is
// stale: three periods, so that one slow or lost heartbeat is not enough.
func StaleAfter(every time.Duration) time.Duration {
	return 3 * max(every, time.Second)
}

// State is HostLive, HostStale or HostStopped at backend time now.
func (h HostRecord) State(now time.Time) string {
	switch {
	case h.Stopped:
		return HostStopped
	case now.Sub(h.LastSeen) > StaleAfter(h.HeartbeatEvery):
		return HostStale
	}
	return HostLive
}

// Hosts is the host registry as read at one instant.
type Hosts struct {
	// Hosts are sorted by host id.
	Hosts []HostRecord `json:"hosts"`
	// Now is the backend's clock at the read: ages are Now - LastSeen, never
	// computed with the reader's clock.
	Now time.Time `json:"now"`
}

// LiveSpecHashes maps each spec hash that live hosts run to their host
// ids, sorted. More than one key means the hosts disagree: a rollout in
// flight, or a server with a stale checkout.
func (h Hosts) LiveSpecHashes() map[string][]string {
	out := map[string][]string{}
	for _, r := range h.Hosts { // sorted by host, so each list is too
		if r.State(h.Now) == HostLive {
			out[r.SpecHash] = append(out[r.SpecHash], r.Host)
		}
	}
	return out
}

// Cluster is what the cluster backend holds for the whole cluster: the
// applied state (inventory, apply records, the apply lock), the host
// registry (every daemon heartbeats its record, rarely: one write every
// 30 s by default, and `coordd status` and /metrics read them), and the
// leader lease.
type Cluster interface {
	// LoadState reads the inventory and the last apply record. A store that
	// was never migrated reads as empty.
	LoadState(ctx context.Context) (State, error)
	// TryLockApply takes the apply lock for owner with a lease of ttl in
	// backend time. It returns ErrLocked while another owner's lease is
	// unexpired. unlock releases only owner's lock.
	TryLockApply(ctx context.Context, owner string, ttl time.Duration) (unlock func(context.Context) error, err error)
	// CommitApply writes the inventory changes and a new apply record
	// atomically, but only while owner still holds the apply lock (ErrLost
	// otherwise). It assigns and returns the new generation.
	CommitApply(ctx context.Context, owner string, rec ApplyRecord, put []InventoryEntry, remove []spec.Address) (int64, error)
	// FindApply returns the latest apply record of specHash, ErrNotFound
	// when that hash was never applied. The daemon uses it to tell a new
	// spec (apply it) from a stale checkout (warn, never apply).
	FindApply(ctx context.Context, specHash string) (ApplyRecord, error)
	// LastApply reads the latest apply record (nil before the first
	// apply): a cheap read for a daemon that compares its spec hash with
	// the applied one, where LoadState reads the inventory too.
	LastApply(ctx context.Context) (*ApplyRecord, error)

	// Heartbeat upserts rec under rec.Host, with LastSeen (and, for a new
	// record or a new RunID, StartedAt) set to backend now. A rec.Host
	// outside spec.CheckHostID is spec.ErrInvalidHostID, with nothing
	// written (CheckHeartbeat).
	Heartbeat(ctx context.Context, rec HostRecord) error
	// ListHosts reads every record and the backend's clock in one read. A
	// store without records (or never migrated) gives none and no error.
	ListHosts(ctx context.Context) (Hosts, error)
	// PruneHosts deletes the records not seen for olderThan of backend
	// time and returns how many it deleted.
	PruneHosts(ctx context.Context, olderThan time.Duration) (int, error)

	// Leader is the leader lease.
	Leader
	// Notices records which failure events were notified.
	Notices
}

// Term is one holder's tenure of the leader lease.
type Term struct {
	Holder    string    `json:"holder"`
	Term      int64     `json:"term"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Leader is the leader lease: the part of Cluster that the leadership
// package's elector needs.
type Leader interface {
	// ElectLeader takes the lease when it is free or expired, starting a new
	// term with a higher number. It returns ErrNotLeader while another
	// holder's lease is unexpired.
	ElectLeader(ctx context.Context, holder string, lease time.Duration) (Term, error)
	// RenewLeader extends the lease only for exactly t's holder and term.
	RenewLeader(ctx context.Context, t Term, lease time.Duration) (Term, error)
	// ResignLeader ends t early so another host can take over at once.
	ResignLeader(ctx context.Context, t Term) error
	// CurrentLeader returns ErrNotFound when nobody holds an unexpired lease.
	CurrentLeader(ctx context.Context) (Term, error)
}
