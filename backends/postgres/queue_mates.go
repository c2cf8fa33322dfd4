package postgres

import (
	"context"
	"sync"
	"time"
)

// The jobs of one claim share its owner token, and their handlers tend to
// finish together. An ack of such a job waits, for at most mateWait after
// the first of them finished, until the other jobs of its claim have
// finished too (acked, retried or returned), so that they go in one batch
// of acks and one commit (a WAL flush) rather than in the two or three
// batches that the order in which their goroutines happen to run would
// make. The wait is the claim's, one timer for all its jobs: a timer per
// ack cost the client a fifth of its CPU in a drain. A lone claim's ack
// does not wait, nor do the acks of a claim whose wait is over.

// mateWait bounds the wait of the acks of a claim for the rest of it,
// from the first of its jobs to finish.
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
// none is left or the wait is over (timer, started by the first job to
// finish).
type mateGroup struct {
	left  int
	at    time.Time
	done  chan struct{}
	timer *time.Timer
}

// end closes g's done and stops its timer; m.mu is held.
func (m *claimMates) end(owner string, g *mateGroup) {
	close(g.done)
	if g.timer != nil {
		g.timer.Stop()
	}
	delete(m.groups, owner)
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
				m.end(o, g)
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
		m.end(owner, g)
		return nil
	}
	if g.timer == nil {
		g.timer = time.AfterFunc(mateWait, func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.groups[owner] == g {
				m.end(owner, g)
			}
		})
	}
	return g.done
}

// await counts one job of owner's claim as finished and waits for the
// others, until the claim's wait is over.
func (m *claimMates) await(ctx context.Context, owner string) {
	done := m.finished(owner)
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}
