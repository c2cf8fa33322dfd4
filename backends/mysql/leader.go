package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The leader lease as backends.Leader: MySQL has no RETURNING, so it
// takes and renews the lease with its own statements (the new expiry comes
// back in the OK packet, LAST_INSERT_ID(expr)); resigning and reading the
// lease are the shared store's.
const (
	// qLeaderTake takes the single leader row in one autocommit statement,
	// against one instant of the backend clock:
	//   - an expired (or resigned) lease: anyone takes it with the next
	//     term (nextTerm: term + 1, at least backend now in µs);
	//   - the same holder's live lease: renewed, same term (idempotent);
	//   - another holder's live lease: the WHERE fails and no row matches.
	// MySQL assigns SET columns left to right, each seeing the columns set
	// before it, so term is computed before holder and expires_at change.
	// The new expiry comes back in the OK packet (LAST_INSERT_ID(expr)).
	qLeaderTake = "UPDATE `{p}leader` SET\n" +
		`  term = IF(holder = ? AND expires_at > ` + nowSQL + `, term, ` + nextTerm + `),
  holder = ?,
  expires_at = LAST_INSERT_ID(` + nowSQL + ` + ?)
WHERE id = 1 AND (expires_at <= ` + nowSQL + ` OR holder = ?)`

	// qLeaderInsert creates the row when it is absent (a fresh store, or the
	// row was deleted behind coordd's back): the first term is backend now
	// in microseconds, so it restarts above every earlier term (terms grow by
	// one per election, far slower than the clock).
	qLeaderInsert = "INSERT INTO `{p}leader` (id, holder, term, expires_at) VALUES (1, ?, " + nowSQL + ", " + nowSQL + " + ?)"

	// qLeaderAny reads the row, live or not, and whether it is live.
	qLeaderAny = "SELECT holder, term, expires_at, expires_at > " + nowSQL + " FROM `{p}leader` WHERE id = 1"

	// qLeaderLocked is qLeaderAny under a row lock (the insert path).
	qLeaderLocked = qLeaderAny + " FOR UPDATE"

	// qLeaderRow reads the row after a take or an insert.
	qLeaderRow = "SELECT holder, term, expires_at FROM `{p}leader` WHERE id = 1"

	// qLeaderRenew extends the lease for exactly one holder and term, and
	// only while it is live, in autocommit; the new expiry comes back in
	// the OK packet.
	qLeaderRenew = "UPDATE `{p}leader` SET expires_at = LAST_INSERT_ID(" + nowSQL + ` + ?)
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > ` + nowSQL
)

// ElectLeader takes the leader lease when it is free, expired or resigned,
// starting a new term; re-electing the live holder renews its lease and keeps
// its term. Another holder's live lease gives ErrNotLeader.
//
// The take is one autocommit statement; a successful one reads the row back
// for its term (a second statement), a refused one reads it to tell a live
// holder (ErrNotLeader) from a missing row, which is then inserted in a
// transaction.
func (s *Store) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	var t backends.Term
	if holder == "" {
		return t, errors.New("elect leader: empty holder")
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return t, fmt.Errorf("elect leader: %w", err)
	}
	for attempt := 1; ; attempt++ {
		t, err = s.electOnce(ctx, holder, us)
		if !errors.Is(err, errRetry) || attempt >= txAttempts {
			break
		}
	}
	if err != nil {
		return backends.Term{}, fmt.Errorf("elect leader %q: %w", holder, err)
	}
	return t, nil
}

func (s *Store) electOnce(ctx context.Context, holder string, us int64) (backends.Term, error) {
	var t backends.Term
	exp, err := lastID(s.autocommit(ctx, qLeaderTake, holder, holder, us, holder))
	switch {
	case err == nil:
		var rowExp int64
		err := s.on(nil).QueryRow(ctx, qLeaderRow).Scan(&t.Holder, &t.Term, &rowExp)
		if err != nil {
			return t, err
		}
		if t.Holder != holder || rowExp != exp {
			return t, errRetry // taken over between the two statements
		}
		t.ExpiresAt = fromMicros(exp)
		return t, nil
	case !errors.Is(err, backends.ErrNotFound):
		return t, err
	}
	var exp2 int64
	var live bool
	err = s.on(nil).QueryRow(ctx, qLeaderAny).Scan(&t.Holder, &t.Term, &exp2, &live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return s.insertLeader(ctx, holder, us)
	case err != nil:
		return t, err
	case live:
		return t, fmt.Errorf("held by %q in term %d until %s: %w", t.Holder, t.Term, fromMicros(exp2).Format(time.RFC3339Nano), backends.ErrNotLeader)
	default:
		return t, errRetry // expired between the two statements
	}
}

// insertLeader creates the missing leader row, held by holder.
func (s *Store) insertLeader(ctx context.Context, holder string, us int64) (backends.Term, error) {
	var t backends.Term
	err := s.write(ctx, func(c conn) error {
		var cur backends.Term
		var exp int64
		var live bool
		err := c.QueryRow(ctx, qLeaderLocked).Scan(&cur.Holder, &cur.Term, &exp, &live)
		switch {
		case err == nil:
			return errRetry // inserted meanwhile: take it the normal way
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if _, err := c.Exec(ctx, qLeaderInsert, holder, us); err != nil {
			if isDup(err) {
				return errRetry
			}
			return err
		}
		if err := c.QueryRow(ctx, qLeaderRow).Scan(&t.Holder, &t.Term, &exp); err != nil {
			return err
		}
		t.ExpiresAt = fromMicros(exp)
		return nil
	})
	return t, err
}

// RenewLeader extends t's lease to now+lease, only while t's holder still
// holds t's term unexpired (ErrNotLeader otherwise). It is one autocommit
// statement: the cheapest write an idle leader makes.
func (s *Store) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader: %w", err)
	}
	exp, err := lastID(s.autocommit(ctx, qLeaderRenew, us, t.Holder, t.Term))
	if errors.Is(err, backends.ErrNotFound) {
		err = backends.ErrNotLeader
	}
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return backends.Term{Holder: t.Holder, Term: t.Term, ExpiresAt: fromMicros(exp)}, nil
}
