package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Idle workers are woken by the database: a trigger on the job table
// (migration 0002) sends NOTIFY on the store's channel, with the queue's
// name as payload, whenever a job becomes claimable by a write: a push, a
// job made ready again, a keyed job's predecessor acked. One connection per
// Store LISTENs and wakes the waiters of that queue. What only the clock
// makes claimable (a delayed job, a visibility that ends) WaitQueue wakes
// for by itself (NextWake), and it claims again at least every
// notifyFallback in case a notification was lost (the listening
// connection broke, a server restart). With wake: poll (PgBouncer in
// transaction mode, where LISTEN does not work), WaitQueue polls as on
// SQLite.

// notifyFallback bounds an idle wait on notifications: a worker claims at
// least this often even when none came.
const notifyFallback = 2 * time.Second

// listenRetry is how long after a failed LISTEN connection waits poll
// instead of trying again.
const listenRetry = 5 * time.Second

// channelName is the NOTIFY channel of one schema and prefix: a hash, so
// that it fits the 63 bytes of an identifier whatever the names.
func channelName(schema, prefix string) string {
	h := sha256.Sum256([]byte(schema + "\x00" + prefix))
	return "coordd_" + hex.EncodeToString(h[:12])
}

// listener is a Store's LISTEN connection and the waiters it wakes.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	running bool      // the connection is up and listening
	failed  time.Time // when it last failed to come up
	stop    context.CancelFunc
	done    chan struct{}
}

// subscribe registers a waiter for queue and makes sure the connection
// listens. It reports false when the connection is not up (the waiter
// must poll); cancel removes the waiter either way.
func (l *listener) subscribe(queue string) (ch chan struct{}, listening bool, cancel func()) {
	ch = make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters == nil {
		l.waiters = map[string]map[chan struct{}]struct{}{}
	}
	if l.waiters[queue] == nil {
		l.waiters[queue] = map[chan struct{}]struct{}{}
	}
	l.waiters[queue][ch] = struct{}{}
	cancel = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.waiters[queue], ch)
		if len(l.waiters[queue]) == 0 {
			delete(l.waiters, queue)
		}
	}
	return ch, l.running, cancel
}

// ensure starts the LISTEN connection unless it runs or failed lately; it
// reports whether the connection listens now.
func (l *listener) ensure(ctx context.Context) bool {
	l.mu.Lock()
	if l.running || l.done != nil || time.Since(l.failed) < listenRetry {
		up := l.running
		l.mu.Unlock()
		return up
	}
	l.mu.Unlock()
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err == nil {
		_, err = conn.Exec(ctx, `LISTEN `+quoteIdent(l.channel))
		if err != nil {
			conn.Close(context.Background())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed = time.Now()
		return false
	}
	if l.running || l.done != nil {
		conn.Close(context.Background()) // another waiter won
		return l.running
	}
	lctx, stop := context.WithCancel(context.Background())
	l.running, l.stop, l.done = true, stop, make(chan struct{})
	go l.loop(lctx, conn, l.done)
	return true
}

// loop receives notifications until ctx ends or the connection fails, and
// wakes every waiter of the notified queue (and all of them when the
// connection fails, so that they poll instead).
func (l *listener) loop(ctx context.Context, conn *pgx.Conn, done chan struct{}) {
	defer close(done)
	defer conn.Close(context.Background())
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			l.mu.Lock()
			l.running, l.done = false, nil
			if ctx.Err() == nil {
				l.failed = time.Now()
			}
			for _, ws := range l.waiters {
				wakeAll(ws)
			}
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		wakeAll(l.waiters[n.Payload])
		l.mu.Unlock()
	}
}

func wakeAll(ws map[chan struct{}]struct{}) {
	for ch := range ws {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close stops the connection and waits for its loop.
func (l *listener) close() {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	if done != nil {
		<-done
	}
}

// WaitQueue blocks until a job of queue may be claimable, maxWait elapsed
// or ctx ended (then its error): woken by NOTIFY, by the clock for
// delayed jobs and ended visibilities, and at least every notifyFallback.
// An absent queue returns at once, so that Claim reports it.
func (s *Store) WaitQueue(ctx context.Context, queue string, maxWait time.Duration) error {
	if s.pollWake {
		return s.Core.WaitQueue(ctx, queue, maxWait)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !s.listen.ensure(ctx) {
		return s.Core.WaitQueue(ctx, queue, min(maxWait, listenRetry))
	}
	// Subscribe before looking, so that a push between the look and the
	// wait still wakes this one.
	ch, listening, cancel := s.listen.subscribe(queue)
	defer cancel()
	if !listening {
		return s.Core.WaitQueue(ctx, queue, min(maxWait, listenRetry))
	}
	may, next, err := s.NextWake(ctx, queue)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return err
	case may:
		return nil
	}
	wait := min(maxWait, notifyFallback)
	if next > 0 {
		wait = min(wait, next)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	// A notification returns at once, even for a job not due yet (a
	// delayed push): the claim that follows finds nothing then, and the
	// next wait reads the new due time. Looking first would cost every
	// wake-up a round trip.
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// qNotifyQueue wakes the idle workers of a queue on every host, as the
// trigger does: for the writes no trigger sees (a delayed job run now, a
// ready job canceled ahead of the next of its key). Arguments: channel,
// queue.
const qNotifyQueue = `SELECT pg_notify($1, $2)`

// notifyQueue sends qNotifyQueue; a failure only delays the workers to
// their next fallback claim.
func (s *Store) notifyQueue(ctx context.Context, queue string) {
	_, _ = s.Core.DB.WriteOne(ctx, qNotifyQueue, s.listen.channel, queue)
}

// RunJobNow is the shared store's (backends.Queues), and wakes the
// queue's idle workers: the job is claimable now.
func (s *Store) RunJobNow(ctx context.Context, queue string, id int64) error {
	if err := s.Core.RunJobNow(ctx, queue, id); err != nil {
		return err
	}
	s.notifyQueue(ctx, queue)
	return nil
}

// CancelJob is the shared store's (backends.Queues), and wakes the
// queue's idle workers: the next job of the canceled one's key may be
// claimable now.
func (s *Store) CancelJob(ctx context.Context, queue string, id int64) error {
	if err := s.Core.CancelJob(ctx, queue, id); err != nil {
		return err
	}
	s.notifyQueue(ctx, queue)
	return nil
}
