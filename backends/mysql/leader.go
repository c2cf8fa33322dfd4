package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

const (
	// qLeaderTake takes the single leader row in one statement, against one
	// instant of the backend clock:
	//   - an expired (or resigned) lease: anyone takes it with term + 1;
	//   - the same holder's live lease: renewed, same term (idempotent);
	//   - another holder's live lease: the WHERE fails and no row matches.
	// MySQL assigns SET columns left to right, each seeing the columns set
	// before it, so term is computed before holder and expires_at change.
	qLeaderTake = "UPDATE `{p}leader` SET\n" +
		`  term = IF(holder = ? AND expires_at > ` + nowSQL + `, term, term + 1),
  holder = ?,
  expires_at = ` + nowSQL + ` + ?
WHERE id = 1 AND (expires_at <= ` + nowSQL + ` OR holder = ?)`

	// qLeaderInsert creates the row when it is absent (a fresh store, or the
	// row was deleted behind coordd's back): the first term is backend now
	// in microseconds, so it restarts above every earlier term (terms grow by
	// one per election, far slower than the clock).
	qLeaderInsert = "INSERT INTO `{p}leader` (id, holder, term, expires_at) VALUES (1, ?, " + nowSQL + ", " + nowSQL + " + ?)"

	// qLeaderLocked reads and locks the row, live or not.
	qLeaderLocked = "SELECT holder, term, expires_at, expires_at > " + nowSQL + " FROM `{p}leader` WHERE id = 1 FOR UPDATE"

	// qLeaderRow reads the row as this transaction left it.
	qLeaderRow = "SELECT holder, term, expires_at FROM `{p}leader` WHERE id = 1"

	// qLeaderRenew extends the lease for exactly one holder and term, and
	// only while it is live.
	qLeaderRenew = "UPDATE `{p}leader` SET expires_at = " + nowSQL + ` + ?
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > ` + nowSQL

	// qLeaderResign ends one holder's term now. The row (and its term) stays,
	// so the next election continues from term + 1.
	qLeaderResign = "UPDATE `{p}leader` SET expires_at = " + nowSQL + `
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > ` + nowSQL

	// qLeaderCurrent reads the live lease, if any.
	qLeaderCurrent = "SELECT holder, term, expires_at FROM `{p}leader` WHERE id = 1 AND expires_at > " + nowSQL
)

// ElectLeader takes the leader lease when it is free, expired or resigned,
// starting a new term; re-electing the live holder renews its lease and keeps
// its term. Another holder's live lease gives ErrNotLeader.
func (s *Store) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	var t backends.Term
	if holder == "" {
		return t, errors.New("elect leader: empty holder")
	}
	us, err := leaseMicros(lease)
	if err != nil {
		return t, fmt.Errorf("elect leader: %w", err)
	}
	err = s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, qLeaderTake, holder, holder, us, holder))
		if err != nil {
			return err
		}
		if n == 0 {
			var cur backends.Term
			var exp int64
			var live bool
			err := c.row(ctx, qLeaderLocked).Scan(&cur.Holder, &cur.Term, &exp, &live)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				if _, err := c.exec(ctx, qLeaderInsert, holder, us); err != nil {
					if isDup(err) {
						return errRetry
					}
					return err
				}
			case err != nil:
				return err
			case live:
				return fmt.Errorf("held by %q in term %d until %s: %w", cur.Holder, cur.Term, fromMicros(exp).Format(time.RFC3339Nano), backends.ErrNotLeader)
			default:
				return errRetry // expired between the two statements
			}
		}
		var exp int64
		if err := c.row(ctx, qLeaderRow).Scan(&t.Holder, &t.Term, &exp); err != nil {
			return err
		}
		t.ExpiresAt = fromMicros(exp)
		return nil
	})
	if err != nil {
		return backends.Term{}, fmt.Errorf("elect leader %q: %w", holder, err)
	}
	return t, nil
}

// RenewLeader extends t's lease to now+lease, only while t's holder still
// holds t's term unexpired (ErrNotLeader otherwise).
func (s *Store) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	us, err := leaseMicros(lease)
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader: %w", err)
	}
	var out backends.Term
	err = s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, qLeaderRenew, us, t.Holder, t.Term))
		if err != nil {
			return err
		}
		if n == 0 {
			return backends.ErrNotLeader
		}
		var exp int64
		if err := c.row(ctx, qLeaderRow).Scan(&out.Holder, &out.Term, &exp); err != nil {
			return err
		}
		out.ExpiresAt = fromMicros(exp)
		return nil
	})
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return out, nil
}

// ResignLeader ends t at once if t's holder still holds t's term, so that
// the next ElectLeader, by anyone, succeeds. Not holding is not an error.
func (s *Store) ResignLeader(ctx context.Context, t backends.Term) error {
	err := s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, qLeaderResign, t.Holder, t.Term)
		return err
	})
	if err != nil {
		return fmt.Errorf("resign leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return nil
}

// CurrentLeader returns the live lease; ErrNotFound when nobody holds one.
func (s *Store) CurrentLeader(ctx context.Context) (backends.Term, error) {
	var t backends.Term
	found := false
	_, err := s.read(ctx, func(c conn) error {
		var exp int64
		err := c.row(ctx, qLeaderCurrent).Scan(&t.Holder, &t.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		t.ExpiresAt, found = fromMicros(exp), true
		return nil
	})
	if err != nil {
		return backends.Term{}, fmt.Errorf("current leader: %w", err)
	}
	if !found {
		return backends.Term{}, fmt.Errorf("current leader: %w", backends.ErrNotFound)
	}
	return t, nil
}
