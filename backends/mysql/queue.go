package mysql

import (
	"context"

	"github.com/coordd/coordd/backends"
)

var _ backends.QueueAdmin = (*Store)(nil)

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
