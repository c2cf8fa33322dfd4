package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

const (
	// qLeaderElect takes the single leader row in one statement, against one
	// instant of the backend clock:
	//   - no row: the first term is backend now in microseconds, so that a
	//     row deleted behind coordd's back restarts above every earlier term
	//     (terms grow by one per election, far slower than the clock);
	//   - an expired (or resigned) lease: anyone takes it with term + 1;
	//   - the same holder's live lease: renewed, same term (idempotent);
	//   - another holder's live lease: the WHERE fails and nothing returns.
	// SQLite evaluates every SET expression against the old row.
	qLeaderElect = `INSERT INTO leader (id, holder, term, expires_at) VALUES (1, ?1, ` + nowSQL + `, ` + nowSQL + ` + ?2)
ON CONFLICT (id) DO UPDATE SET
  term = CASE WHEN leader.holder = excluded.holder AND leader.expires_at > ` + nowSQL + ` THEN leader.term ELSE leader.term + 1 END,
  holder = excluded.holder,
  expires_at = excluded.expires_at
WHERE leader.expires_at <= ` + nowSQL + ` OR leader.holder = excluded.holder
RETURNING holder, term, expires_at`

	// qLeaderRenew extends the lease for exactly one holder and term, and
	// only while it is live.
	qLeaderRenew = `UPDATE leader SET expires_at = ` + nowSQL + ` + ?
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > ` + nowSQL + `
RETURNING holder, term, expires_at`

	// qLeaderResign ends one holder's term now. The row (and its term) stays,
	// so the next election continues from term + 1.
	qLeaderResign = `UPDATE leader SET expires_at = ` + nowSQL + `
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > ` + nowSQL

	// qLeaderCurrent reads the live lease, if any.
	qLeaderCurrent = `SELECT holder, term, expires_at FROM leader WHERE id = 1 AND expires_at > ` + nowSQL
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
		var exp int64
		err := c.row(ctx, qLeaderElect, holder, us).Scan(&t.Holder, &t.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			var cur backends.Term
			if err := c.row(ctx, qLeaderCurrent).Scan(&cur.Holder, &cur.Term, &exp); err == nil {
				return fmt.Errorf("held by %q in term %d until %s: %w", cur.Holder, cur.Term, fromMicros(exp).Format(time.RFC3339Nano), backends.ErrNotLeader)
			}
			return backends.ErrNotLeader
		}
		if err != nil {
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
		var exp int64
		err := c.row(ctx, qLeaderRenew, us, t.Holder, t.Term).Scan(&out.Holder, &out.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotLeader
		}
		if err != nil {
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
