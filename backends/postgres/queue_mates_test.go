package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestClaimMates: the acks of one claim wait for each other until the
// last job finishes, a lone claim's ack never waits, an ack whose mates
// never finish waits mateWait at most, the wait is the claim's (an ack
// after it is over goes at once), and old groups are forgotten once too
// many are tracked.
func TestClaimMates(t *testing.T) {
	var m claimMates
	m.claimed("lone", 1)
	if m.finished("lone") != nil {
		t.Error("the ack of a lone claim waits")
	}
	m.claimed("o", 3)
	first, second := m.finished("o"), m.finished("o")
	if first == nil || second == nil {
		t.Fatal("the first acks of a claim of 3 do not wait")
	}
	select {
	case <-first:
		t.Fatal("released before the last job finished")
	default:
	}
	if m.finished("o") != nil {
		t.Error("the last ack of a claim waits")
	}
	select {
	case <-first:
	default:
		t.Fatal("not released by the last job")
	}
	m.claimed("stuck", 2)
	start := time.Now()
	m.await(context.Background(), "stuck")
	if d := time.Since(start); d < mateWait || d > mateWait+time.Second {
		t.Errorf("an ack whose mate never finished waited %v, want about %v", d, mateWait)
	}
	if m.finished("stuck") != nil {
		t.Error("an ack after its claim's wait was over waits again")
	}
	for i := len(m.groups); i < maxMateGroups; i++ {
		m.claimed(fmt.Sprint("g", i), 2)
	}
	time.Sleep(2 * mateWait)
	m.claimed("new", 2)
	if n := len(m.groups); n != 1 {
		t.Errorf("%d groups tracked after the old ones expired, want 1", n)
	}
}
