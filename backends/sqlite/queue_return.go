package sqlite

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// qJobReturn puts a job owner ?3 holds back as ready, taking back the
// attempt its claim counted. available_at and the id are unchanged, so the
// job keeps its place in its partition; last_error is kept.
const qJobReturn = `UPDATE queue_jobs
SET state = 'ready', owner = NULL, expires_at = 0, attempt = max(attempt - 1, 0)
WHERE id = ?1 AND queue = ?2 AND owner = ?3 AND state = 'running'`

// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
// with its attempt not counted.
func (s *Store) ReturnJob(ctx context.Context, j backends.Job) error {
	err := s.write(ctx, func(c conn) error {
		res, err := c.Exec(ctx, qJobReturn, j.ID, j.Queue, j.Owner)
		if err != nil {
			return err
		}
		return jobAffected(res)
	})
	if err != nil {
		return fmt.Errorf("return job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}
