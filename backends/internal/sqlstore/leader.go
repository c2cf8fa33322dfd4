package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The leader lease is the one row of the leader table: holder, term and
// expiry in store time. These statements are the Standard flavor's, each
// one round trip with RETURNING; a MySQL store, which has no RETURNING,
// brings its own ElectLeader and RenewLeader.
var (
	// qLeaderElect takes the single leader row in one statement, against
	// one instant of the store's clock:
	//   - no row: the first term is the clock in microseconds, so that a
	//     row deleted behind coordd's back restarts above every earlier
	//     term (terms grow by one per election, far slower than the clock);
	//   - an expired (or resigned) lease: anyone takes it with term + 1;
	//   - the same holder's live lease: renewed, same term (idempotent);
	//   - another holder's live lease: the WHERE fails and nothing returns.
	// Every SET expression sees the old row. Arguments: holder, lease µs,
	// holder.
	qLeaderElect = Query{SQL: `INSERT INTO {p}leader AS l (id, holder, term, expires_at) VALUES (1, ?, {now}, {now} + ?)
ON CONFLICT (id) DO UPDATE SET
  term = CASE WHEN l.holder = excluded.holder AND l.expires_at > {now} THEN l.term ELSE {next:l.term} END,
  holder = excluded.holder,
  expires_at = excluded.expires_at
WHERE l.expires_at <= {now} OR l.holder = ?
RETURNING holder, term, expires_at`}

	// qLeaderRenew extends the lease for exactly one holder and term, and
	// only while it is live. Arguments: lease µs, holder, term.
	qLeaderRenew = Query{SQL: `UPDATE {p}leader SET expires_at = {now} + ?
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > {now}
RETURNING holder, term, expires_at`}

	// qLeaderResign ends one holder's term now. The row (and its term)
	// stays, so the next election continues from term + 1. Arguments:
	// holder, term.
	qLeaderResign = Query{SQL: `UPDATE {p}leader SET expires_at = {now}
WHERE id = 1 AND holder = ? AND term = ? AND expires_at > {now}`}

	// qLeaderCurrent reads the live lease, if any.
	qLeaderCurrent = Query{SQL: `SELECT holder, term, expires_at FROM {p}leader WHERE id = 1 AND expires_at > {now}`}
)

// ElectLeader takes the leader lease when it is free, expired or resigned,
// starting a new term; re-electing the live holder renews its lease and
// keeps its term. Another holder's live lease gives ErrNotLeader.
func (s *Core) ElectLeader(ctx context.Context, holder string, lease time.Duration) (backends.Term, error) {
	var t backends.Term
	if holder == "" {
		return t, errors.New("elect leader: empty holder")
	}
	us, err := LeaseMicros(lease)
	if err != nil {
		return t, fmt.Errorf("elect leader: %w", err)
	}
	d := s.DB.Dialect()
	err = s.DB.Write(ctx, func(c Conn) error {
		var exp int64
		err := c.QueryRow(ctx, d.Text(qLeaderElect), holder, us, holder).Scan(&t.Holder, &t.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			var cur backends.Term
			if err := c.QueryRow(ctx, d.Text(qLeaderCurrent)).Scan(&cur.Holder, &cur.Term, &exp); err == nil {
				return fmt.Errorf("held by %q in term %d until %s: %w", cur.Holder, cur.Term, FromMicros(exp).Format(time.RFC3339Nano), backends.ErrNotLeader)
			}
			return backends.ErrNotLeader
		}
		if err != nil {
			return err
		}
		t.ExpiresAt = FromMicros(exp)
		return nil
	})
	if err != nil {
		return backends.Term{}, fmt.Errorf("elect leader %q: %w", holder, err)
	}
	return t, nil
}

// RenewLeader extends t's lease to now+lease, only while t's holder still
// holds t's term unexpired (ErrNotLeader otherwise).
func (s *Core) RenewLeader(ctx context.Context, t backends.Term, lease time.Duration) (backends.Term, error) {
	us, err := LeaseMicros(lease)
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader: %w", err)
	}
	var out backends.Term
	err = s.DB.Write(ctx, func(c Conn) error {
		var exp int64
		err := c.QueryRow(ctx, s.DB.Dialect().Text(qLeaderRenew), us, t.Holder, t.Term).Scan(&out.Holder, &out.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotLeader
		}
		if err != nil {
			return err
		}
		out.ExpiresAt = FromMicros(exp)
		return nil
	})
	if err != nil {
		return backends.Term{}, fmt.Errorf("renew leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return out, nil
}

// ResignLeader ends t at once if t's holder still holds t's term, so that
// the next ElectLeader, by anyone, succeeds. Not holding is not an error.
func (s *Core) ResignLeader(ctx context.Context, t backends.Term) error {
	if _, err := s.DB.WriteOne(ctx, s.DB.Dialect().Text(qLeaderResign), t.Holder, t.Term); err != nil {
		return fmt.Errorf("resign leader %q term %d: %w", t.Holder, t.Term, err)
	}
	return nil
}

// CurrentLeader returns the live lease; ErrNotFound when nobody holds one.
func (s *Core) CurrentLeader(ctx context.Context) (backends.Term, error) {
	var t backends.Term
	found := false
	_, err := s.DB.ReadOne(ctx, func(c Conn) error {
		var exp int64
		err := c.QueryRow(ctx, s.DB.Dialect().Text(qLeaderCurrent)).Scan(&t.Holder, &t.Term, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		t.ExpiresAt, found = FromMicros(exp), true
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
