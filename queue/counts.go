package queue

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/backends"
)

const (
	// countEvery is how often a worker adds what it counted to the
	// store's queue counts (backends.QueueCounters): one small write per
	// worker, so an ack or a retry costs the store nothing more. A worker
	// killed at once loses at most its last countEvery of counts.
	countEvery = 5 * time.Second
	// countTimeout bounds one add; the last one, when Work returns, must
	// not hold up a stopping worker for long.
	countTimeout = time.Second
)

// tally counts the jobs one Work call processed (acked) and the attempts
// that failed (retried, or moved to the dead set), and adds them to the
// store every countEvery and once more when Work returns. An add that
// fails keeps its counts for the next one.
type tally struct {
	q                 backends.Queues
	queue             string
	logf              func(string, ...any)
	processed, failed atomic.Int64
	failing           bool // the last add failed; only the add loop reads it
}

// start adds the counts every countEvery until the function it returns
// is called, which adds what is left and returns.
func (t *tally) start() (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tk := time.NewTicker(countEvery)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				t.add()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		t.add()
	}
}

// add writes the counts gathered since the last add.
func (t *tally) add() {
	c := backends.QueueCount{Processed: t.processed.Swap(0), Failed: t.failed.Swap(0)}
	if c.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	if err := t.q.AddQueueCounts(ctx, map[string]backends.QueueCount{t.queue: c}); err != nil {
		t.processed.Add(c.Processed)
		t.failed.Add(c.Failed)
		if !t.failing {
			t.logf("queue %s: adding this worker's counts to the store failed (kept for the next try, every %v): %v", t.queue, countEvery, err)
		}
		t.failing = true
		return
	}
	if t.failing {
		t.logf("queue %s: this worker's counts reach the store again", t.queue)
	}
	t.failing = false
}
