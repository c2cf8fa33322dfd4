package postgres

import (
	"context"
	"sync"
	"time"
)

// The jobs of one claim share its owner token, and their handlers tend to
// finish together. An ack of such a job waits, for at most mateWait, until
// the other jobs of its claim have finished too (acked, retried or
// returned), so that they go in one batch of acks and one commit (a WAL
// flush) rather than in the two or three batches that the order in which
// their goroutines happen to run would make. A lone claim's ack does not
// wait.

// mateWait bounds the wait of an ack for the rest of its claim.
const mateWait = 500 * time.Microsecond

// maxMateGroups bounds the claims tracked; past it, groups older than
// mateWait are forgotten (their jobs' acks go at once).
const maxMateGroups = 4096

// claimMates tracks the claims whose jobs are not all finished.
type claimMates struct {
	mu     sync.Mutex
	groups map[string]*mateGroup // by owner token
}

// mateGroup is one claim: the jobs not finished yet, and done, closed when
// none is left.
type mateGroup struct {
	left int
	at   time.Time
	done chan struct{}
}

// claimed records a claim of n jobs by owner.
func (m *claimMates) claimed(owner string, n int) {
	if n < 2 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups == nil {
		m.groups = map[string]*mateGroup{}
	}
	if len(m.groups) >= maxMateGroups {
		for o, g := range m.groups {
			if time.Since(g.at) > mateWait {
				close(g.done)
				delete(m.groups, o)
			}
		}
	}
	m.groups[owner] = &mateGroup{left: n, at: time.Now(), done: make(chan struct{})}
}

// finished counts one job of owner's claim as finished and returns the
// channel closed once all are (nil: nothing to wait for).
func (m *claimMates) finished(owner string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[owner]
	if g == nil {
		return nil
	}
	g.left--
	if g.left <= 0 {
		close(g.done)
		delete(m.groups, owner)
		return nil
	}
	return g.done
}

// await counts one job of owner's claim as finished and waits, at most
// mateWait, for the others.
func (m *claimMates) await(ctx context.Context, owner string) {
	done := m.finished(owner)
	if done == nil {
		return
	}
	t := time.NewTimer(mateWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}
