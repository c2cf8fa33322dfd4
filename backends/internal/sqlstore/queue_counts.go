package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// The queue_counts table: what workers did with each queue's jobs, one row
// per queue and minute of the store's clock (backends.QueueCounters).
var (
	// qQueueCountsAdd adds to the row of the minute that holds the store's
	// now ({now} is one instant within a statement on every store).
	// Arguments: queue, processed, failed.
	qQueueCountsAdd = Query{
		SQL: `INSERT INTO {p}queue_counts AS c (queue, minute, processed, failed)
VALUES (?, {now} - {now} % 60000000, ?, ?)
ON CONFLICT (queue, minute) DO UPDATE SET processed = c.processed + excluded.processed, failed = c.failed + excluded.failed`,
		MySQL: `INSERT INTO {p}queue_counts (queue, minute, processed, failed)
VALUES (?, {now} - {now} % 60000000, ?, ?)
ON DUPLICATE KEY UPDATE processed = processed + VALUES(processed), failed = failed + VALUES(failed)`,
	}

	// qQueueCountsRead reads the store's clock and a queue's minutes from
	// ? µs before it: the one-row derived table on the left gives the
	// clock when there is no minute. Arguments: queue, since.
	qQueueCountsRead = Query{SQL: `SELECT t.n, c.minute, c.processed, c.failed
FROM (SELECT {now} AS n) t LEFT JOIN {p}queue_counts c ON c.queue = ? AND c.minute >= t.n - ?
ORDER BY c.minute`}

	// qQueueCountsPrune deletes the minutes older than ? µs
	// (queue_counts_minute).
	qQueueCountsPrune = Query{SQL: `DELETE FROM {p}queue_counts WHERE minute < {now} - ?`}
)

// AddQueueCounts adds each queue's counts to the current minute, in one
// transaction, queues in name order (so that two writers lock rows in one
// order).
func (s *Core) AddQueueCounts(ctx context.Context, counts map[string]backends.QueueCount) error {
	names := backends.CountedQueues(counts)
	if len(names) == 0 {
		return nil
	}
	d := s.DB.Dialect()
	err := s.DB.Write(ctx, func(c Conn) error {
		for _, q := range names {
			if _, err := c.Exec(ctx, d.Text(qQueueCountsAdd), q, counts[q].Processed, counts[q].Failed); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add queue counts: %w", err)
	}
	return nil
}

// ReadQueueCounts reads queue's minutes within since of the store's now.
func (s *Core) ReadQueueCounts(ctx context.Context, queue string, since time.Duration) (backends.QueueCounts, error) {
	d := s.DB.Dialect()
	var out backends.QueueCounts
	_, err := s.DB.Read(ctx, func(c Conn) error {
		out = backends.QueueCounts{}
		rows, err := c.Query(ctx, d.Text(qQueueCountsRead), queue, NonNegMicros(since))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var now int64
			var minute, processed, failed *int64
			if err := rows.Scan(&now, &minute, &processed, &failed); err != nil {
				return err
			}
			out.Now = FromMicros(now)
			if minute != nil {
				out.Minutes = append(out.Minutes, backends.QueueMinute{Minute: FromMicros(*minute),
					QueueCount: backends.QueueCount{Processed: deref(processed), Failed: deref(failed)}})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return backends.QueueCounts{}, fmt.Errorf("read counts of queue %q: %w", queue, err)
	}
	return out, nil
}

// PruneQueueCounts deletes the minutes older than olderThan.
func (s *Core) PruneQueueCounts(ctx context.Context, olderThan time.Duration) (int, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qQueueCountsPrune), NonNegMicros(olderThan)))
	if err != nil {
		return 0, fmt.Errorf("prune queue counts: %w", err)
	}
	return int(n), nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
