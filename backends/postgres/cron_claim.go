package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
)

// qCronClaimCall makes a batch of scheduled claims in one call of the
// function migration 0005 creates (cron_claim; see there). Columns per
// claim: ord (from 1, in the order given), status (0 or a
// backends.ClaimRefusal), fencing, started_at, expires_at. Arguments:
// tasks, scheduled_at, next_exec (NULL: none), owners, run ids, leases
// (µs), exclusive, host.
var qCronClaimCall = sqlstore.Query{SQL: `SELECT ord, status, fencing, started_at, expires_at
FROM {p}cron_claim(?::text[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::bigint[], ?::boolean[], ?)`}

// ClaimOccurrences makes the claims of attempt 1 of scheduled times (the
// burst of many tasks due at once) in one call of cron_claim, and the
// others (skips, retries) as the shared store does; see
// backends.Crons.ClaimOccurrences. A schema without the function (an
// older one) takes the shared path for all.
func (s *Store) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	return backends.ClaimBatch(reqs, func(batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
		// The call takes one host for its claims: a scheduler's batch has
		// one.
		var fast, rest []int
		for i, r := range batch {
			if r.Attempt == 1 && !r.Manual && r.Skip == "" && r.Host == batch[0].Host {
				fast = append(fast, i)
			} else {
				rest = append(rest, i)
			}
		}
		out := make([]backends.ClaimResult, len(batch))
		if len(fast) > 0 {
			done, err := s.claimScheduled(ctx, batch, fast, out)
			if err != nil {
				return nil, err
			}
			if !done {
				rest = append(fast, rest...)
			}
		}
		if len(rest) == 0 {
			return out, nil
		}
		sub := make([]backends.ClaimRequest, len(rest))
		for k, i := range rest {
			sub[k] = batch[i]
		}
		res, err := s.Core.ClaimOccurrences(ctx, sub)
		if err != nil {
			return nil, err
		}
		for k, i := range rest {
			out[i] = res[k]
		}
		return out, nil
	})
}

// claimScheduled makes the claims idx of reqs with qCronClaimCall, in task
// order, into out; done is false when the schema has no cron_claim.
func (s *Store) claimScheduled(ctx context.Context, reqs []backends.ClaimRequest, idx []int, out []backends.ClaimResult) (done bool, err error) {
	if err := s.pool.Writable(ctx); err != nil {
		return false, fmt.Errorf("claim %d cron occurrences: %w", len(idx), err)
	}
	order := sqlstore.TaskOrder(len(idx), func(k int) string { return reqs[idx[k]].Task })
	n := len(order)
	tasks, owners, runIDs := make([]string, n), make([]string, n), make([]string, n)
	sched, leases := make([]int64, n), make([]int64, n)
	next := make([]sql.NullInt64, n)
	excl := make([]bool, n)
	occs := make([]backends.Occurrence, n)
	for k, o := range order {
		r := reqs[idx[o]]
		occs[k] = backends.Occurrence{Task: r.Task, Attempt: 1, RunID: backends.NewCronRunID(), Owner: r.Owner, Host: r.Host, ScheduledAt: sqlstore.FromMicros(r.ScheduledAt.UnixMicro())}
		tasks[k], owners[k], runIDs[k] = r.Task, r.Owner, occs[k].RunID
		sched[k], leases[k], excl[k] = r.ScheduledAt.UnixMicro(), r.Lease.Microseconds(), r.Exclusive
		next[k] = sqlstore.ToNullMicros(r.Next)
	}
	got := 0
	err = s.pool.Retry(ctx, s.pool.Attempts, func() error {
		got = 0
		rows, err := s.pool.On(nil).Query(ctx, s.dialect.Text(qCronClaimCall), tasks, sched, nullInts(next), owners, runIDs, leases, excl, reqs[idx[0]].Host)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ord, status int
			var fencing, started, expires sql.NullInt64
			if err := rows.Scan(&ord, &status, &fencing, &started, &expires); err != nil {
				return err
			}
			if ord < 1 || ord > n {
				return fmt.Errorf("cron_claim: claim %d of %d", ord, n)
			}
			k, i := ord-1, idx[order[ord-1]]
			if status != 0 {
				out[i] = backends.ClaimResult{Err: backends.ClaimError(reqs[i], backends.ClaimRefusal(status).Err(reqs[i]))}
			} else {
				o := occs[k]
				o.Fencing, o.StartedAt, o.ExpiresAt = fencing.Int64, sqlstore.FromMicros(started.Int64), sqlstore.FromMicros(expires.Int64)
				out[i] = backends.ClaimResult{Occurrence: o}
			}
			got++
		}
		return rows.Err()
	})
	switch {
	case isNoSuchFunction(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim %d cron occurrences: %w", n, s.pool.Explain(ctx, err))
	case got != n:
		return false, fmt.Errorf("claim %d cron occurrences: cron_claim answered %d", n, got)
	}
	return true, nil
}

// nullInts is a bigint[] argument whose NULL elements are invalid ones.
func nullInts(v []sql.NullInt64) []*int64 {
	out := make([]*int64, len(v))
	for i := range v {
		if v[i].Valid {
			out[i] = &v[i].Int64
		}
	}
	return out
}
