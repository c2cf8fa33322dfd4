package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coordd/coordd/spec"
)

// Waiting for a slot of a session-mode semaphore (see session.go), on the
// connection the waiter keeps until it gets a slot or leaves the line.
//
// The line lock (the last key of the semaphore's block) orders the waiters
// in the server: each blocks in pg_advisory_lock on it, and PostgreSQL
// grants a lock to the sessions waiting for it in the order they asked, so
// exactly one waiter, the head, holds it and the others wait in the server
// without a statement of their own to send. The head LISTENs on the
// semaphore's channel, tries the slots (qSessTryHead) and, when none is
// free, waits for a notification: every release frees its slot and then
// sends NOTIFY in one statement, and the head listens before it tries, so
// a release between its try and its wait still reaches it (pgx keeps the
// notifications a connection received). A notification lost all the same
// (a server restart) delays the head by at most notifyFallback, after
// which it tries again. The head gives the line lock up in the statement
// that takes its slot, so the next waiter heads the line at once.
//
// The server's order is not the line's: a waiter that entered the line
// (its ticket, semaphore_waiters) just after another may ask for the line
// lock just before it, and a waiter whose wait ends (the semaphore package
// renews its record every third of its waiter lease) asks again at the
// tail. The grant keeps the line's order (qSessGrant, grantLocked): a head
// with live waiters ahead of it that the free slots do not cover gives its
// slot back, with a NOTIFY, and backs off, and the next head tries.

const (
	// qSessLockLine waits in the server for the line lock, at most the
	// lock_timeout the first column sets for this statement (error
	// 55P03 when it runs out). Arguments: timeout in ms, key.
	qSessLockLine = `SELECT set_config('lock_timeout', ?::text, true), pg_advisory_lock(?::bigint)`

	// qSessTryHead is qSessTry for the head of the line, which gives the
	// line lock up in the same statement when it takes a slot. Arguments:
	// the line key, qSessTry's.
	qSessTryHead = `SELECT t.mode, t.lim, t.session_slots, t.slot,
  CASE WHEN t.slot >= 0 THEN pg_advisory_unlock(?::bigint) END
FROM (` + qSessTry + ` OFFSET 0) AS t(mode, lim, session_slots, slot)`

	// qSessLeave frees every advisory lock of a waiter's session (it gave
	// up) and tells the head that a slot it held may be free.
	// Arguments: channel.
	qSessLeave = `SELECT pg_advisory_unlock_all(), pg_notify(?, '')`
)

// notifyFallback bounds a head's wait for a notification: it tries the
// slots again at least this often, in case one was lost.
const sessNotifyFallback = 2 * time.Second

// codeLockNotAvailable is the error of a lock wait that lock_timeout ended.
const codeLockNotAvailable = "55P03"

// sessionWait blocks owner until a slot of session-mode semaphore name may
// be free, maxWait elapsed or ctx ended; the head of the line may take the
// slot already, which owner's next TryAcquire completes. The connection
// and its locks stay with owner until its TryAcquire succeeds or it leaves
// the line.
func (s *Store) sessionWait(ctx context.Context, name, owner string, maxWait time.Duration) error {
	w := s.sess.takeWaiter(owner)
	if w != nil && w.name != name {
		w.drop()
		w = nil
	}
	if w == nil {
		w = &session{name: name, owner: owner, slot: -1}
	}
	defer s.sess.putWaiter(w)
	if w.d == nil {
		d, err := s.dedicate(ctx)
		if err != nil {
			return s.sessWaitErr(ctx, name, err)
		}
		w.d = d
	}
	if err := s.sessionWaitOn(ctx, w, maxWait); err != nil {
		return s.sessWaitErr(ctx, name, err)
	}
	return ctx.Err()
}

// sessWaitErr reports ctx's error when the wait failed because ctx ended.
func (s *Store) sessWaitErr(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("wait semaphore %q: %w", name, err)
}

// sessionWaitOn is one wait on w's connection: in line for the line lock,
// then as the head. An error other than ctx's end of a notification wait
// drops the connection (and the locks with it).
func (s *Store) sessionWaitOn(ctx context.Context, w *session, maxWait time.Duration) error {
	if w.slot >= 0 {
		return nil
	}
	if w.behind > 0 {
		// The line refused the last grant: let the waiters ahead take
		// their slots before trying again.
		return sleepCtx(ctx, min(w.behind, maxWait))
	}
	deadline := time.Now().Add(maxWait)
	base := s.lockBase(w.name)
	if !w.line {
		err := s.drow(ctx, w.d, qSessLockLine, []any{strconv.FormatInt(max(maxWait.Milliseconds(), 1), 10), base + lineSlot}, new(string), new(string))
		switch {
		case hasCode(err, codeLockNotAvailable):
			return nil // still in line: the caller renews its record and waits again
		case err != nil:
			s.endBlocked(w)
			return err
		}
		w.line = true
	}
	ch := s.sessChannel(w.name)
	if w.d.listening != ch {
		if _, err := s.dexec(ctx, w.d, `LISTEN `+quoteIdent(ch)); err != nil {
			w.drop()
			return err
		}
		w.d.listening = ch
	}
	for {
		var r sessionTry
		var got *int64
		var unlocked *bool
		err := s.drow(ctx, w.d, qSessTryHead, []any{base + lineSlot, base, w.name}, &r.mode, &r.limit, &r.slots, &got, &unlocked)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			w.drop()
			return err
		}
		if err != nil || r.mode != spec.ModeSession {
			return nil // absent or not in mode session: TryAcquire says so
		}
		if got != nil && *got >= 0 {
			w.slot, w.line = int(*got), false
			return nil
		}
		left := time.Until(deadline)
		if got == nil || left <= 0 {
			// Draining (TryAcquire decides under the row lock), or the
			// wait is over.
			return nil
		}
		if err := s.awaitNotify(ctx, w.d, min(left, sessNotifyFallback)); err != nil {
			return err
		}
	}
}

// awaitNotify waits up to d for a notification on the head's connection;
// nil when one came or d elapsed, ctx's error when ctx ended first.
func (s *Store) awaitNotify(ctx context.Context, d *dedicated, wait time.Duration) error {
	nctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := d.conn.WaitForNotification(nctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case nctx.Err() != nil:
		return nil
	}
	return err
}

// endBlocked drops a waiter whose wait for the line lock failed or was
// cancelled: pgx closed the connection, and the server, which learns of a
// closed connection only when it next writes to it, would keep the
// session in the lock's queue (and give it the line lock) until then; it
// is ended through the statement pool at once.
func (s *Store) endBlocked(w *session) {
	pid := w.d.pid
	w.drop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.pool.CountTrip()
	_, _ = s.db.ExecContext(ctx, qTerminate, pid)
}

// qTerminate ends a session of this store's (a waiter's whose connection
// was closed while it waited in the server).
const qTerminate = `SELECT pg_terminate_backend($1)`

// sleepCtx sleeps d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sessionLeave frees what owner's wait holds (the line lock, or a slot
// taken while waiting that TryAcquire never completed) by closing its
// connection; a slot is freed first with a NOTIFY, so that the next head
// finds it at once.
func (s *Store) sessionLeave(ctx context.Context, owner string) {
	w := s.sess.takeWaiter(owner)
	if w == nil || w.d == nil {
		return
	}
	if w.slot < 0 && !w.line && w.d.listening == "" {
		s.undedicate(w.d)
		return
	}
	if w.slot >= 0 {
		_, _ = s.dexec(ctx, w.d, qSessLeave, s.sessChannel(w.name))
	}
	w.drop()
}
