package mysql

import (
	"context"

	"github.com/coordd/coordd/backends"
)

// The writes below are the shared store's; each then wakes workers parked
// on the queue (queue_park.go) for the jobs it made claimable. A wake-up
// follows the commit, and a failed one only delays a worker until its
// SLEEP ends.

// PutQueue is the shared store's; jobs it moved out of removed partitions
// were not claimable (a claim takes only partitions below the count) and
// now are, so it wakes parked workers for them.
func (s *Store) PutQueue(ctx context.Context, cfg backends.QueueConfig) (int64, error) {
	moved, err := s.Core.PutQueue(ctx, cfg)
	if moved > 0 {
		s.wakeQueue(ctx, cfg.Name, int(min(moved, maxWake)))
	}
	return moved, err
}

// Retry is the shared store's, the reason made storable (storableText). A
// job that went back to the queue wakes a parked worker: at once without a
// backoff, and with one, the worker re-parks with the job's available_at
// as its bound. A job with a key that died lets the next job of its key
// start, which wakes one too.
func (s *Store) Retry(ctx context.Context, j backends.Job, reason string) error {
	ready, err := s.RetryJob(ctx, j, storableText(reason))
	if err != nil {
		return err
	}
	if ready || j.Key != "" {
		s.wakeQueue(ctx, j.Queue, 1)
	}
	return nil
}

// ReturnJob is the shared store's, and wakes a parked worker.
func (s *Store) ReturnJob(ctx context.Context, j backends.Job) error {
	if err := s.Core.ReturnJob(ctx, j); err != nil {
		return err
	}
	s.wakeQueue(ctx, j.Queue, 1)
	return nil
}

// RequeueDead is the shared store's, and wakes a parked worker per job
// requeued, up to maxWake.
func (s *Store) RequeueDead(ctx context.Context, queue string) (int64, error) {
	n, err := s.Core.RequeueDead(ctx, queue)
	if n > 0 {
		s.wakeQueue(ctx, queue, int(min(n, maxWake)))
	}
	return n, err
}

// RunJobNow is the shared store's (backends.Queues), and wakes one parked
// worker: the job is claimable now.
func (s *Store) RunJobNow(ctx context.Context, queue string, id int64) error {
	if err := s.Core.RunJobNow(ctx, queue, id); err != nil {
		return err
	}
	s.wakeQueue(ctx, queue, 1)
	return nil
}

// CancelJob is the shared store's (backends.Queues), and wakes one parked
// worker: the next job of the canceled one's key may be claimable now.
func (s *Store) CancelJob(ctx context.Context, queue string, id int64) error {
	if err := s.Core.CancelJob(ctx, queue, id); err != nil {
		return err
	}
	s.wakeQueue(ctx, queue, 1)
	return nil
}

// RequeueDeadJob is the shared store's (backends.Queues), and wakes one
// parked worker.
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.Core.RequeueDeadJob(ctx, queue, id); err != nil {
		return err
	}
	s.wakeQueue(ctx, queue, 1)
	return nil
}
