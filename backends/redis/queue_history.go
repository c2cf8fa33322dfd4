package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	goredis "github.com/redis/go-redis/v9"
)

// A queue's history on Redis: a job's attempt errors live in its record
// (lua/queue_retry.lua adds them; the one-job reads return them with the
// job), and each queue's counts per minute in a
// hash and a sorted set of minutes under the queue's hash tag, which
// expire a retention after their last write.

// queueCountsAddScript adds a queue's counts to the current minute
// (AddQueueCounts; lua/queue_counts_add.lua).
var queueCountsAddScript = luaScript("queue_counts_add.lua")

// queueCountsReadScript reads a queue's minutes (ReadQueueCounts;
// lua/queue_counts_read.lua).
var queueCountsReadScript = luaScript("queue_counts_read.lua")

// queueCounts are a queue's counts keys: the hash, then the minutes.
func (k keys) queueCounts(name string) []string {
	return []string{k.object("queue", name, "counts"), k.object("queue", name, "count_minutes")}
}

// AddQueueCounts adds each queue's counts to the current minute, one
// script per queue in one pipeline (each queue's keys have their own hash
// tag).
func (s *Store) AddQueueCounts(ctx context.Context, counts map[string]backends.QueueCount) error {
	if err := s.writable(); err != nil {
		return err
	}
	names := backends.CountedQueues(counts)
	if len(names) == 0 {
		return nil
	}
	keep := int64(backends.QueueCountRetention / time.Second)
	var err error
	perr := queueScriptsPipelined(ctx, s.rdb, queueCountsAddScript, len(names), func(i int) ([]string, []any) {
		return s.keys.queueCounts(names[i]), []any{counts[names[i]].Processed, counts[names[i]].Failed, keep}
	}, func(_ int, c *goredis.Cmd) {
		if err == nil {
			err = c.Err()
		}
	})
	if perr != nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("add queue counts: %w", err)
	}
	return nil
}

// ReadQueueCounts reads queue's minutes within since of the server's now.
func (s *Store) ReadQueueCounts(ctx context.Context, queue string, since time.Duration) (backends.QueueCounts, error) {
	res, err := queueCountsReadScript.RunRO(ctx, s.rdb, s.keys.queueCounts(queue), int64(max(since, 0)/time.Second)).Slice()
	if err != nil || len(res) == 0 {
		if err == nil {
			err = fmt.Errorf("empty reply")
		}
		return backends.QueueCounts{}, fmt.Errorf("read counts of queue %q: %w", queue, err)
	}
	out := backends.QueueCounts{Now: queueTime(queueInt(res[0]))}
	for i := 1; i+3 <= len(res); i += 3 {
		out.Minutes = append(out.Minutes, backends.QueueMinute{
			Minute:     time.Unix(queueInt(res[i]), 0).UTC(),
			QueueCount: backends.QueueCount{Processed: queueInt(res[i+1]), Failed: queueInt(res[i+2])},
		})
	}
	return out, nil
}

// PruneQueueCounts does nothing: old minutes go as counts are added, and
// the keys of a queue nobody works expire.
func (s *Store) PruneQueueCounts(context.Context, time.Duration) (int, error) { return 0, nil }
