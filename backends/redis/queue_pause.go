package redis

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// An operator's pause of a queue is the field pause of its meta hash, a
// record like a cron task's pause ({"host", "at" (server TIME in µs, as a
// string), "reason"}, see cron_pause.go). PutQueue sets the other fields
// of meta and keeps it; DeleteQueue deletes meta, and the pause with it.
// Workers read it with QueuePaused before they claim; the claim itself
// does not look at it.

// queueMetaPause is the field of a queue's meta hash that holds its pause.
const queueMetaPause = "pause"

// queuePauseScript records an operator's pause at the server's TIME unless
// the queue is already paused (lua/queue_pause.lua).
var queuePauseScript = luaScript("queue_pause.lua")

// queueResumeScript removes an operator's pause (lua/queue_resume.lua).
var queueResumeScript = luaScript("queue_resume.lua")

// PauseQueue implements backends.Queues in one script.
func (s *Store) PauseQueue(ctx context.Context, name, host, reason string) (backends.Pause, bool, error) {
	if err := s.writable(); err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: %w", name, err)
	}
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: %w", name, err)
	}
	res, err := s.queueEval(ctx, queuePauseScript, s.queueInfo(name).fixed, host, reason)
	if err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: %w", name, err)
	}
	if len(res) == 0 || queueInt(res[0]) == 0 {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: %w", name, backends.ErrNotFound)
	}
	if len(res) != 3 {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: script returned %d values", name, len(res))
	}
	p, err := parseCronPause(queueStr(res[1]))
	if err != nil {
		return backends.Pause{}, false, fmt.Errorf("pause queue %q: %w", name, err)
	}
	return p, queueInt(res[2]) == 1, nil
}

// ResumeQueue implements backends.Queues in one script.
func (s *Store) ResumeQueue(ctx context.Context, name string) (*backends.Pause, error) {
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", name, err)
	}
	res, err := s.queueEval(ctx, queueResumeScript, s.queueInfo(name).fixed)
	if err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", name, err)
	}
	if len(res) == 0 || queueInt(res[0]) == 0 {
		return nil, fmt.Errorf("resume queue %q: %w", name, backends.ErrNotFound)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("resume queue %q: script returned %d values", name, len(res))
	}
	p, err := queuePauseOf(queueStr(res[1]))
	if err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", name, err)
	}
	return p, nil
}

// QueuePaused implements backends.Queues with one HMGET of the queue's
// meta hash: partitions tells an absent queue apart, pause is the pause.
func (s *Store) QueuePaused(ctx context.Context, name string) (*backends.Pause, error) {
	v, err := s.rdb.HMGet(ctx, s.queueInfo(name).fixed[0], "partitions", queueMetaPause).Result()
	if err != nil {
		return nil, fmt.Errorf("queue %q paused: %w", name, err)
	}
	if len(v) != 2 || v[0] == nil {
		return nil, fmt.Errorf("queue %q paused: %w", name, backends.ErrNotFound)
	}
	text, _ := v[1].(string)
	p, err := queuePauseOf(text)
	if err != nil {
		return nil, fmt.Errorf("queue %q paused: %w", name, err)
	}
	return p, nil
}

// queuePauseOf decodes a pause record; "" is no pause.
func queuePauseOf(text string) (*backends.Pause, error) {
	if text == "" {
		return nil, nil
	}
	p, err := parseCronPause(text)
	if err != nil {
		return nil, err
	}
	return &p, nil
}
