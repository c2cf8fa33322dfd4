package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// A lease-mode acquire and the common release are one call each of a
// function that migration 0004 creates (sem_acquire, sem_release): the
// shared store's transaction run in the server, one round trip and one
// commit where the transaction costs six round trips. The functions lock
// the semaphore's row first and read after the lock, as the transaction
// does; see the migration for why a single statement could not. A schema
// without them (an older one) takes the shared path.
var (
	// qSemAcquireCall is the acquire. Columns: present, keyed, lim, live,
	// free_slot, ahead, fencing (NULL: not granted), expires_at.
	// Arguments: name, owner, host, pid, lease µs.
	qSemAcquireCall = sqlstore.Query{SQL: `SELECT present, keyed, lim, live, free_slot, ahead, fencing, expires_at
FROM {p}sem_acquire(?, ?, ?, ?, ?)`}

	// qSemReleaseCall is the release. Columns: status (0 freed, 1 not
	// held, 2 take the shared path), was_live. Arguments: name, owner.
	qSemReleaseCall = sqlstore.Query{SQL: `SELECT status, was_live FROM {p}sem_release(?, ?)`}
)

// Statuses of qSemReleaseCall.
const (
	releaseFreed   = 0
	releaseNotHeld = 1
	releaseShared  = 2
)

// isNoSuchFunction reports a call of a function the schema lacks.
func isNoSuchFunction(err error) bool { return hasCode(err, "42883") }

// leaseAcquire is TryAcquire of a lease-mode semaphore (not an instance)
// in one call, with the shared store's answers.
func (s *Store) leaseAcquire(ctx context.Context, name string, req backends.AcquireRequest) (backends.Grant, error) {
	lease, err := sqlstore.CheckAcquireRequest(backends.SemRef{Name: name}.String(), req)
	if err != nil {
		return backends.Grant{}, err
	}
	if err := s.pool.Writable(ctx); err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
	}
	var present bool
	var keyed sql.NullBool // NULL for an absent semaphore
	var lim, live, ahead sql.NullInt64
	var slot, fencing, exp sql.NullInt64
	err = s.pool.Retry(ctx, s.pool.Attempts, func() error {
		return s.pool.On(nil).QueryRow(ctx, s.dialect.Text(qSemAcquireCall), name, req.Owner, req.Host, req.PID, lease).
			Scan(&present, &keyed, &lim, &live, &slot, &ahead, &fencing, &exp)
	})
	switch {
	case isNoSuchFunction(err):
		return s.Core.TryAcquire(ctx, backends.SemRef{Name: name}, req)
	case err != nil:
		err = s.pool.Explain(ctx, err)
	case !present:
		err = backends.ErrNotFound
	case keyed.Bool:
		err = backends.ErrKeyRequired
	case !fencing.Valid:
		err = sqlstore.Refusal(live.Int64, lim.Int64, ahead.Int64, slot.Valid)
		if err == nil {
			err = fmt.Errorf("the acquire refused what the limit and the line allow: %w", backends.ErrNoSlot)
		}
	default:
		return backends.Grant{Slot: int(slot.Int64), Fencing: fencing.Int64, ExpiresAt: sqlstore.FromMicros(exp.Int64)}, nil
	}
	return backends.Grant{}, fmt.Errorf("acquire %q: %w", name, err)
}

// leaseRelease is Release of a lease-mode slot row (not an instance's) in
// one call when no row needs retiring, else the shared release.
func (s *Store) leaseRelease(ctx context.Context, name, owner string) error {
	if err := s.pool.Writable(ctx); err != nil {
		return fmt.Errorf("release %q: %w", name, err)
	}
	var status int
	var wasLive bool
	err := s.pool.Retry(ctx, s.pool.Attempts, func() error {
		return s.pool.On(nil).QueryRow(ctx, s.dialect.Text(qSemReleaseCall), name, owner).Scan(&status, &wasLive)
	})
	switch {
	case isNoSuchFunction(err) || err == nil && status == releaseShared:
		return s.Core.Release(ctx, backends.SemRef{Name: name}, owner)
	case err != nil:
		err = s.pool.Explain(ctx, err)
	case status == releaseNotHeld:
		err = backends.ErrLost
	case status != releaseFreed:
		err = fmt.Errorf("release call: status %d", status)
	case !wasLive:
		err = fmt.Errorf("lease had expired: %w", backends.ErrLost)
	default:
		return nil
	}
	return fmt.Errorf("release %q: %w", name, err)
}
