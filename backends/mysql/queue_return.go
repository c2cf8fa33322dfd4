package mysql

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// qJobReturn puts a job its owner holds back as ready, taking back the
// attempt its claim counted. available_at and the id are unchanged, so the
// job keeps its place (in id order for partition claims, in (available_at,
// id) order for skip_locked ones); last_error is kept. Arguments: id,
// queue, owner.
const qJobReturn = "UPDATE `{p}queue_jobs`\n" +
	"SET state = 'ready', owner = NULL, expires_at = 0, attempt = IF(attempt > 0, attempt - 1, 0)\n" +
	"WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"

// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
// with its attempt not counted, and wakes a parked worker.
func (s *Store) ReturnJob(ctx context.Context, j backends.Job) error {
	if err := jobAffected(s.autocommit(ctx, qJobReturn, j.ID, j.Queue, j.Owner)); err != nil {
		return fmt.Errorf("return job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	s.wakeQueue(ctx, j.Queue, 1)
	return nil
}
