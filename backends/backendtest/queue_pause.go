package backendtest

import (
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testQueuePause checks an operator's pause of a queue (backends.Queues):
// recorded once at backend time with its host and reason, read by the
// workers' cheap read and by ObserveQueues, kept by an apply, removed by a
// resume and by deleting the queue, refused with nothing written for an
// absent queue or a bad host id; another queue is not touched.
func testQueuePause(t *testing.T, h Harness) {
	t.Parallel()
	b, open := fresh(t, h)
	ctx := t.Context()
	cfg := runtimeConfig("q", 2)
	q, adm := runtimeQueue(t, b, cfg)
	runtimeQueue(t, b, runtimeConfig("other", 1))
	other := queuesOf(t, open())

	_, _, err := q.PauseQueue(ctx, "nope", "web-1", "x")
	wantErr(t, err, backends.ErrNotFound, "pause an absent queue")
	_, err = q.QueuePaused(ctx, "nope")
	wantErr(t, err, backends.ErrNotFound, "read the pause of an absent queue")
	_, err = q.ResumeQueue(ctx, "nope")
	wantErr(t, err, backends.ErrNotFound, "resume an absent queue")
	if _, _, err := q.PauseQueue(ctx, "q", "bad host/id", "x"); err == nil {
		t.Fatal("a bad host id was accepted")
	}
	if _, _, err := q.PauseQueue(ctx, "q", "web-1", strings.Repeat("r", backends.MaxPauseReason+1)); err == nil {
		t.Fatal("a reason over the limit was accepted")
	}
	if p, err := q.QueuePaused(ctx, "q"); err != nil || p != nil {
		t.Fatalf("a refused pause was written: %+v, %v", p, err)
	}

	before, err := b.Now(ctx)
	ok(t, err, "now")
	p, changed, err := q.PauseQueue(ctx, "q", "web-1", "the image service is down")
	ok(t, err, "pause")
	after, err := b.Now(ctx)
	ok(t, err, "now")
	if !changed || p.Host != "web-1" || p.Reason != "the image service is down" ||
		p.At.Before(before.Add(-time.Millisecond)) || p.At.After(after.Add(time.Millisecond)) {
		t.Fatalf("pause = %+v, changed %v; want web-1, the reason, backend time in [%v, %v]", p, changed, before, after)
	}
	again, changed, err := other.PauseQueue(ctx, "q", "web-2", "later")
	ok(t, err, "pause again")
	if changed || again != p {
		t.Fatalf("a second pause from another handle: %+v changed %v; want the first %+v kept", again, changed, p)
	}
	for _, c := range []backends.Queues{q, other} {
		got, err := c.QueuePaused(ctx, "q")
		ok(t, err, "read the pause")
		if got == nil || *got != p {
			t.Fatalf("QueuePaused = %+v, want %+v", got, p)
		}
	}
	st := observeQueue(t, adm, "q")
	if st.Paused == nil || *st.Paused != p {
		t.Fatalf("ObserveQueues shows pause %+v, want %+v", st.Paused, p)
	}
	if st := observeQueue(t, adm, "other"); st.Paused != nil {
		t.Fatalf("the other queue is paused: %+v", st.Paused)
	}
	// An apply (a new config) keeps the pause.
	cfg.MaxAttempts++
	putQueue(t, adm, cfg, 0)
	if got, err := q.QueuePaused(ctx, "q"); err != nil || got == nil || *got != p {
		t.Fatalf("after an apply the pause is %+v, %v; want it kept", got, err)
	}

	prev, err := other.ResumeQueue(ctx, "q")
	ok(t, err, "resume")
	if prev == nil || *prev != p {
		t.Fatalf("resume returned %+v, want the pause %+v", prev, p)
	}
	if got, err := q.QueuePaused(ctx, "q"); err != nil || got != nil {
		t.Fatalf("after resume the pause is %+v, %v", got, err)
	}
	if prev, err := q.ResumeQueue(ctx, "q"); err != nil || prev != nil {
		t.Fatalf("a second resume: %+v, %v; want nil, nil", prev, err)
	}

	// Deleting the queue drops its pause.
	_, _, err = q.PauseQueue(ctx, "q", "web-1", "gone soon")
	ok(t, err, "pause")
	ok(t, adm.DeleteQueue(ctx, "q", true), "delete")
	putQueue(t, adm, cfg, 0)
	if got, err := q.QueuePaused(ctx, "q"); err != nil || got != nil {
		t.Fatalf("a queue deleted and created again has pause %+v, %v", got, err)
	}
}
