package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/spec"
)

// Semaphores of mode lease are the shared SQL store's (sqlstore); the
// calls below route mode session (session*.go) to its advisory locks and
// add its holders to what the admin calls see.

// PutSemaphore creates or updates the semaphore, repairs its slot rows to
// max(limit, live holders) and its session_slots (mode session), and
// wakes the head of a session-mode line, whose turn a higher limit may
// make.
func (s *Store) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if err := sqlstore.CheckSemaphore(cfg); err != nil {
		return err
	}
	if cfg.Mode == spec.ModeSession {
		switch {
		case cfg.Keyed:
			// A session slot is an advisory lock that no row records: an
			// instance's holders could be neither listed nor drained.
			return fmt.Errorf("put semaphore %q: keyed in mode session: %w", cfg.Name, backends.ErrUnsupported)
		case cfg.Limit > maxSessionLimit:
			return fmt.Errorf("put semaphore %q: limit %d above %d in mode session: %w", cfg.Name, cfg.Limit, maxSessionLimit, backends.ErrUnsupported)
		}
	}
	d := s.dialect
	err := s.pool.Write(ctx, func(c sqlstore.Conn) error {
		if err := sqlstore.PutSemaphoreRow(ctx, c, d, cfg); err != nil {
			return err
		}
		if err := s.repairSessionSlots(ctx, c, cfg.Name, cfg.Mode, cfg.Limit); err != nil {
			return err
		}
		return sqlstore.RepairSlots(ctx, c, d, cfg.Name, sqlstore.SlotRows(cfg.Limit, cfg.Mode, cfg.Keyed), true)
	})
	if err != nil {
		return fmt.Errorf("put semaphore %q: %w", cfg.Name, err)
	}
	s.sess.setMode(cfg.Name, cfg.Mode)
	if cfg.Mode == spec.ModeSession {
		s.notifySession(ctx, cfg.Name)
	}
	return nil
}

// DeleteSemaphore removes the semaphore when nobody holds it, else drains
// it (ErrHeld), as sqlstore's does; the holders of its slot locks count
// too, and a drain lowers session_slots to the holders'. The head of a
// session-mode line learns at once that the semaphore is gone.
func (s *Store) DeleteSemaphore(ctx context.Context, name string) error {
	d := s.dialect
	held, session := 0, false
	err := s.pool.Write(ctx, func(c sqlstore.Conn) error {
		r, exists, err := sqlstore.LockSemaphore(ctx, c, d, name)
		if err != nil {
			return err
		}
		if held, err = sqlstore.LiveHolders(ctx, c, d, name); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		session = r.Mode == spec.ModeSession
		locks, err := s.slotLocksConn(ctx, c, name)
		if err != nil {
			return err
		}
		held += len(locks)
		if held == 0 {
			return sqlstore.DropSemaphore(ctx, c, d, name)
		}
		if err := sqlstore.DrainSemaphore(ctx, c, d, name); err != nil {
			return err
		}
		return s.repairSessionSlots(ctx, c, name, r.Mode, 0)
	})
	if err != nil {
		return fmt.Errorf("delete semaphore %q: %w", name, err)
	}
	if session {
		s.notifySession(ctx, name)
	}
	if held > 0 {
		return fmt.Errorf("delete semaphore %q: %d live holders: %w", name, held, backends.ErrHeld)
	}
	return nil
}

// TryAcquire takes a slot of a session-mode semaphore (sessionAcquire) or
// of a lease-mode one (leaseAcquire; an instance's, sqlstore's). The mode is cached per name (see
// modeEntry); each path checks the stored mode.
func (s *Store) TryAcquire(ctx context.Context, ref backends.SemRef, req backends.AcquireRequest) (backends.Grant, error) {
	if ref.IsInstance() {
		return s.Core.TryAcquire(ctx, ref, req)
	}
	session, err := s.isSessionMode(ctx, ref.Name)
	if err != nil {
		return backends.Grant{}, fmt.Errorf("acquire %q: %w", ref.Name, err)
	}
	if session {
		return s.sessionAcquire(ctx, ref.Name, req)
	}
	return s.leaseAcquire(ctx, ref.Name, req)
}

// Extend renews owner's lease; a session-mode holder's slot has no expiry,
// and Extend checks that its connection still holds the lock.
func (s *Store) Extend(ctx context.Context, ref backends.SemRef, owner string, lease time.Duration) (time.Time, error) {
	if !ref.IsInstance() {
		if h := s.sess.holder(owner); h != nil && h.name == ref.Name {
			return s.sessionExtend(ctx, h, lease)
		}
	}
	return s.Core.Extend(ctx, ref, owner, lease)
}

// Release frees owner's slot: the lock of a session-mode holder, else its
// slot row (leaseRelease; an instance's, sqlstore's).
func (s *Store) Release(ctx context.Context, ref backends.SemRef, owner string) error {
	if ref.IsInstance() {
		return s.Core.Release(ctx, ref, owner)
	}
	if h := s.sess.holder(owner); h != nil && h.name == ref.Name {
		return s.sessionRelease(ctx, h)
	}
	return s.leaseRelease(ctx, ref.Name, owner)
}

// Holders lists live holders by slot, lease rows and slot locks alike; an
// absent semaphore has none. Those of a keyed semaphore's instances
// follow; an instance reference lists the instance's.
func (s *Store) Holders(ctx context.Context, ref backends.SemRef) ([]backends.Holder, error) {
	if ref.IsInstance() {
		return s.Core.Holders(ctx, ref)
	}
	name := ref.Name
	m, err := s.ObserveSemaphores(ctx, []string{name})
	if err != nil {
		return nil, fmt.Errorf("holders %q: %w", name, err)
	}
	st := m[name]
	if st == nil {
		return nil, nil
	}
	slices.SortStableFunc(st.Holders, func(a, b backends.Holder) int {
		if a.Key != b.Key {
			return strings.Compare(a.Key, b.Key)
		}
		return a.Slot - b.Slot
	})
	return st.Holders, nil
}

// ObserveSemaphores reads many semaphores in one snapshot: the rows
// sqlstore reads, the slot locks of those in mode session, their
// instances.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	_, err := s.pool.Read(ctx, func(c sqlstore.Conn) error {
		clear(out)
		for _, l := range sqlstore.ListChunks(s.dialect, names) {
			session, err := sqlstore.ObserveSemaphoreRows(ctx, c, s.dialect, l, out)
			if err != nil {
				return err
			}
			for name := range session {
				st := out[name]
				stored, want, err := s.sessionState(ctx, c, st)
				if err != nil {
					return err
				}
				// session_slots may stay above what the holders need until
				// an acquirer lowers it; only one too low (behind coordd's
				// back) is drift.
				if stored >= want {
					st.Slots = max(st.Config.Limit, len(st.Holders))
				} else {
					st.Slots += stored
				}
			}
			if err := sqlstore.ObserveInstances(ctx, c, s.dialect, l, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe semaphores: %w", err)
	}
	return out, nil
}

// WaitSemaphore waits on owner's dedicated connection in mode session
// (sessionWait), else as sqlstore's lease-mode waiters do.
func (s *Store) WaitSemaphore(ctx context.Context, ref backends.SemRef, owner string, maxWait time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ref.IsInstance() {
		session, err := s.isSessionMode(ctx, ref.Name)
		if err != nil {
			return s.sessWaitErr(ctx, ref.Name, err)
		}
		if session {
			return s.sessionWait(ctx, ref.Name, owner, maxWait)
		}
	}
	return s.Core.WaitSemaphore(ctx, ref, owner, maxWait)
}

// LeaveWait removes owner's waiter record, after freeing what a
// session-mode wait holds (its connection and locks).
func (s *Store) LeaveWait(ctx context.Context, ref backends.SemRef, owner string) error {
	if !ref.IsInstance() {
		s.sessionLeave(ctx, owner)
	}
	return s.Core.LeaveWait(ctx, ref, owner)
}
