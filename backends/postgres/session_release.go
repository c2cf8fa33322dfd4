package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// Extend and release of a session-mode holder (see session.go): a check
// that its connection still holds the slot's lock, and the release of the
// lock with a NOTIFY for the head of the line.

const (
	// qSessPing reports whether this session still holds the advisory lock
	// of the key, and the server's now. Arguments: key, key.
	qSessPing = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
  AND objsubid = 1 AND granted AND classid = (?::bigint >> 32)::oid AND objid = (?::bigint & 4294967295)::oid), {now}`

	// qSessRelease frees a slot lock (false: this session did not hold
	// it) and wakes the head of the line, in one statement. The
	// notification is sent at commit; the commit does not wait for the
	// WAL flush (synchronous_commit off for this statement), since it
	// makes nothing durable and the wake-up would wait for it.
	// Arguments: key, channel.
	qSessRelease = `SELECT set_config('synchronous_commit', 'off', true), pg_advisory_unlock(?::bigint), pg_notify(?, '')`
)

// sessionExtend checks the holder's connection: the slot is still held
// while its session holds the lock. The lease only says when the holder
// must check again.
func (s *Store) sessionExtend(ctx context.Context, h *session, lease time.Duration) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, backends.ErrLost)
	}
	pctx, cancel := context.WithTimeout(ctx, pingDeadline)
	defer cancel()
	var err error
	if h.d.listening != "" {
		// A former head: stop receiving the releases it no longer waits for.
		if _, err = s.dexec(pctx, h.d, `UNLISTEN *`); err == nil {
			h.d.listening = ""
		}
	}
	var held bool
	var now int64
	key := s.lockBase(h.name) + int64(h.slot)
	if err == nil {
		err = s.drow(pctx, h.d, qSessPing, []any{key, key}, &held, &now)
	}
	if ctx.Err() != nil {
		s.forget(h)
		return time.Time{}, fmt.Errorf("extend %q: %w", h.name, ctx.Err())
	}
	if err != nil || !held {
		// The session is gone (and the slot with it), or the lock is not
		// ours: either way this hold is over.
		s.forget(h)
		cause := "the slot lock is no longer held by this session"
		if err != nil {
			cause = "connection lost: " + err.Error()
		}
		return time.Time{}, fmt.Errorf("extend %q: %s: %w", h.name, cause, backends.ErrLost)
	}
	return sqlstore.FromMicros(now + lease.Microseconds()), nil
}

// forget drops a hold whose session is gone, or whose connection a
// cancelled statement may have left unusable.
func (s *Store) forget(h *session) {
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	h.drop()
}

// sessionRelease frees the holder's slot lock, wakes the head of the line
// and returns the connection.
func (s *Store) sessionRelease(ctx context.Context, h *session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.sess.mu.Lock()
	if s.sess.held[h.owner] == h {
		delete(s.sess.held, h.owner)
	}
	s.sess.mu.Unlock()
	if h.d == nil || h.slot < 0 {
		return fmt.Errorf("release %q: %w", h.name, backends.ErrLost)
	}
	var released bool
	err := s.drow(ctx, h.d, qSessRelease, []any{s.lockBase(h.name) + int64(h.slot), s.sessChannel(h.name)}, new(string), &released, new(string))
	h.slot = -1
	if err != nil {
		h.drop()
		return fmt.Errorf("release %q: %w", h.name, backends.ErrLost)
	}
	if h.d.listening != "" {
		// A former head that never extended: stop listening, so that the
		// connection (and the server's caches warmed on it) can be reused.
		if _, err := s.dexec(ctx, h.d, `UNLISTEN *`); err == nil {
			h.d.listening = ""
		}
	}
	s.undedicate(h.d)
	h.d = nil
	if !released {
		return fmt.Errorf("release %q: the slot lock was no longer held: %w", h.name, backends.ErrLost)
	}
	return nil
}
