package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/coordd/coordd/backends"
)

// queueReturnScript puts a claimed job back (ReturnJob;
// lua/queue_return.lua).
var queueReturnScript = luaScript("queue_return.lua")

// ReturnJob puts a job j.Owner still holds (ErrLost) back as ready now,
// with its attempt not counted.
func (s *Store) ReturnJob(ctx context.Context, j backends.Job) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueReturnScript, j.Queue, queueArgs(strconv.FormatInt(j.ID, 10), j.Owner))
	if err == nil {
		switch queueInt(res[0]) {
		case 1:
		case 3:
			err = backends.ErrLost
		default:
			err = fmt.Errorf("script status %v", res[0])
		}
	}
	if err != nil {
		return fmt.Errorf("return job %d of queue %q as %q: %w", j.ID, j.Queue, j.Owner, err)
	}
	return nil
}
