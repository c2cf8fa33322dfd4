package backendtest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testQueueDeadJob checks backends.Queues: one dead job requeued or
// purged, the other dead jobs and every live job left alone, and a job
// that is not dead (or of another queue) refused with ErrNotFound and left
// as it was. Every backend that holds queues must implement it: the
// dashboard's buttons on a dead job's page rely on it.
func testQueueDeadJob(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	dj := b.Queues()
	if dj == nil {
		t.Fatalf("the %s backend holds queues but does not implement backends.Queues", b.Type())
	}
	cfg := runtimeConfig("q", 2)
	cfg.MaxAttempts, cfg.RetryBackoff = 1, 0
	q, adm := runtimeQueue(t, b, cfg)
	other := runtimeConfig("other", 1)
	other.MaxAttempts, other.RetryBackoff = 1, 0
	runtimeQueue(t, b, other)

	kill := func(queue string, req backends.PushRequest) backends.Job {
		t.Helper()
		j := push(t, q, queue, req)
		c := claimOne(t, q, queue, newOwner("w"))
		if c.ID != j.ID {
			t.Fatalf("claimed job %d, want %d", c.ID, j.ID)
		}
		ok(t, q.Retry(ctx, c, "boom "+req.Key), "retry to the dead set")
		return j
	}
	a := kill("q", backends.PushRequest{Payload: []byte("a"), Key: "ka"})
	d := kill("q", backends.PushRequest{Payload: []byte("d")})
	x := kill("other", backends.PushRequest{Payload: []byte("x")})
	ready := push(t, q, "q", backends.PushRequest{Payload: []byte("ready"), Delay: time.Hour})
	wantCounts(t, adm, "q", 1, 0, 2, 1)

	for _, tc := range []struct {
		what  string
		queue string
		id    int64
	}{
		{"a job of another queue", "q", x.ID},
		{"a delayed job", "q", ready.ID},
		{"an id never pushed", "q", d.ID + 1000},
		{"an absent queue", "nope", a.ID},
	} {
		wantErr(t, dj.RequeueDeadJob(ctx, tc.queue, tc.id), backends.ErrNotFound, "requeue "+tc.what)
		wantErr(t, dj.PurgeDeadJob(ctx, tc.queue, tc.id), backends.ErrNotFound, "purge "+tc.what)
	}
	wantCounts(t, adm, "q", 1, 0, 2, 1)

	// Requeued: ready now with its attempts reset and its error kept, and
	// claimable again (its key with it); the other dead job stays dead.
	ok(t, dj.RequeueDeadJob(ctx, "q", a.ID), "requeue one dead job")
	wantErr(t, dj.RequeueDeadJob(ctx, "q", a.ID), backends.ErrNotFound, "requeue it twice")
	wantCounts(t, adm, "q", 2, 0, 1, 1)
	dead, err := q.Dead(ctx, "q", 10)
	ok(t, err, "dead")
	if len(dead) != 1 || dead[0].ID != d.ID {
		t.Fatalf("dead jobs after the requeue: %+v, want job %d only", dead, d.ID)
	}
	j := claimOne(t, q, "q", newOwner("w"))
	if j.ID != a.ID || j.Attempt != 1 || j.Key != "ka" || string(j.Payload) != "a" || j.LastError != "boom ka" {
		t.Fatalf("claimed after the requeue: job %d attempt %d key %q payload %q error %q, want job %d attempt 1 key ka payload a error %q",
			j.ID, j.Attempt, j.Key, j.Payload, j.LastError, a.ID, "boom ka")
	}
	ok(t, q.Ack(ctx, j), "ack")

	// Purged: gone, the other queue's dead job untouched.
	ok(t, dj.PurgeDeadJob(ctx, "q", d.ID), "purge one dead job")
	wantErr(t, dj.PurgeDeadJob(ctx, "q", d.ID), backends.ErrNotFound, "purge it twice")
	wantErr(t, dj.RequeueDeadJob(ctx, "q", d.ID), backends.ErrNotFound, "requeue a purged job")
	wantCounts(t, adm, "q", 1, 0, 0, 1)
	wantCounts(t, adm, "other", 0, 0, 1, 0)
}

// testQueueDeadRead checks backends.Queues: pages of the dead set
// in Dead's order, each job as Dead reads it but with its payload and
// last error cut at the length asked for (binary payloads, an empty one,
// one shorter than the cut) and the whole payload's length; one dead job
// read by id the same way, and every job that is not a dead job of the
// queue refused with ErrNotFound.
func testQueueDeadRead(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	dr := b.Queues()
	if dr == nil {
		t.Fatalf("the %s backend holds queues but does not implement backends.Queues", b.Type())
	}
	cfg := runtimeConfig("q", 2)
	cfg.MaxAttempts, cfg.RetryBackoff = 1, 0
	q, _ := runtimeQueue(t, b, cfg)
	other := runtimeConfig("other", 1)
	other.MaxAttempts, other.RetryBackoff = 1, 0
	runtimeQueue(t, b, other)

	kill := func(queue string, req backends.PushRequest, reason string) backends.Job {
		t.Helper()
		j := push(t, q, queue, req)
		c := claimOne(t, q, queue, newOwner("w"))
		if c.ID != j.ID {
			t.Fatalf("claimed job %d, want %d", c.ID, j.ID)
		}
		ok(t, q.Retry(ctx, c, reason), "retry to the dead set")
		return j
	}
	binary := make([]byte, 5000)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	kill("q", backends.PushRequest{Payload: binary, Key: "k1"}, strings.Repeat("é", 300)) // 600 bytes
	kill("q", backends.PushRequest{Payload: []byte{}}, "empty payload")
	kill("q", backends.PushRequest{Payload: []byte("short")}, "")
	kill("q", backends.PushRequest{Payload: append([]byte("\x00\xff"), binary[:300]...)}, "nul and 0xff")
	x := kill("other", backends.PushRequest{Payload: []byte("x")}, "other queue")
	ready := push(t, q, "q", backends.PushRequest{Payload: []byte("ready"), Delay: time.Hour})

	whole, err := q.Dead(ctx, "q", 0)
	ok(t, err, "dead")
	if len(whole) != 4 {
		t.Fatalf("%d dead jobs, want 4", len(whole))
	}
	cutJob := func(j backends.Job, n int) backends.PartialJob {
		p := backends.PartialJob{Job: j, PayloadSize: int64(len(j.Payload))}
		p.Payload = j.Payload[:min(n, len(j.Payload))]
		p.LastError = j.LastError[:min(n, len(j.LastError))]
		return p
	}
	same := func(what string, got, want backends.PartialJob) {
		t.Helper()
		if got.ID != want.ID || got.Queue != want.Queue || got.Partition != want.Partition || got.Key != want.Key ||
			got.Attempt != want.Attempt || !got.EnqueuedAt.Equal(want.EnqueuedAt) || !got.AvailableAt.Equal(want.AvailableAt) ||
			!bytes.Equal(got.Payload, want.Payload) || got.PayloadSize != want.PayloadSize || got.LastError != want.LastError ||
			got.Payload == nil {
			t.Fatalf("%s: got job %d partition %d key %q attempt %d enqueued %v available %v payload %q (%d of %d bytes, nil %v) error %q\n"+
				"want job %d partition %d key %q attempt %d enqueued %v available %v payload %q (%d of %d bytes) error %q",
				what, got.ID, got.Partition, got.Key, got.Attempt, got.EnqueuedAt, got.AvailableAt, got.Payload, len(got.Payload), got.PayloadSize, got.Payload == nil, got.LastError,
				want.ID, want.Partition, want.Key, want.Attempt, want.EnqueuedAt, want.AvailableAt, want.Payload, len(want.Payload), want.PayloadSize, want.LastError)
		}
	}

	for _, n := range []int{0, 1, 100, 1 << 20} {
		page, err := dr.DeadPage(ctx, "q", 0, 10, n)
		ok(t, err, "dead page")
		if len(page) != len(whole) {
			t.Fatalf("cut %d: a page of %d jobs, want %d", n, len(page), len(whole))
		}
		for i, j := range whole {
			want := cutJob(j, n)
			same(fmt.Sprintf("cut %d, job %d of the page", n, i), page[i], want)
			if page[i].Truncated() != (n < len(j.Payload)) {
				t.Fatalf("cut %d, job %d: Truncated %v of a %d-byte payload", n, i, page[i].Truncated(), len(j.Payload))
			}
			one, err := dr.DeadJob(ctx, "q", j.ID, n)
			ok(t, err, fmt.Sprintf("dead job %d", j.ID))
			same(fmt.Sprintf("cut %d, dead job %d", n, j.ID), one, want)
		}
	}

	// Pages: consecutive offsets give the dead set in order, once each.
	var paged []int64
	for off := 0; off < 10; off += 3 {
		page, err := dr.DeadPage(ctx, "q", off, 3, 10)
		ok(t, err, "dead page")
		if len(page) > 3 {
			t.Fatalf("offset %d limit 3: %d jobs", off, len(page))
		}
		for _, j := range page {
			paged = append(paged, j.ID)
		}
	}
	for i, j := range whole {
		if i >= len(paged) || paged[i] != j.ID {
			t.Fatalf("paged through ids %v, want the dead set's order %v", paged, whole)
		}
	}
	if len(paged) != len(whole) {
		t.Fatalf("paged through ids %v, want %d jobs", paged, len(whole))
	}
	for _, tc := range []struct {
		what                 string
		queue                string
		offset, limit, count int
	}{
		{"a limit of 0", "q", 0, 0, 0},
		{"an offset past the end", "q", 4, 10, 0},
		{"the last job", "q", 3, 10, 1},
		{"an absent queue", "nope", 0, 10, 0},
		{"the other queue", "other", 0, 10, 1},
	} {
		page, err := dr.DeadPage(ctx, tc.queue, tc.offset, tc.limit, 10)
		ok(t, err, "dead page of "+tc.what)
		if len(page) != tc.count {
			t.Fatalf("dead page of %s: %d jobs, want %d", tc.what, len(page), tc.count)
		}
	}

	for _, tc := range []struct {
		what  string
		queue string
		id    int64
	}{
		{"a job of another queue", "q", x.ID},
		{"a delayed job", "q", ready.ID},
		{"an id never pushed", "q", ready.ID + 1000},
		{"an absent queue", "nope", whole[0].ID},
	} {
		_, err := dr.DeadJob(ctx, tc.queue, tc.id, 10)
		wantErr(t, err, backends.ErrNotFound, "dead job: "+tc.what)
	}
}

// testQueueDiedAt checks that a dead job's AvailableAt is its time of
// death, by the backend's clock, whether it died of a failed attempt
// (Retry) or of a lease that ran out (the claim that found it expired):
// `coordd queue dead`, its JSON and the dashboard show it as such.
func testQueueDiedAt(t *testing.T, h Harness) {
	t.Parallel()
	b, _ := fresh(t, h)
	ctx := t.Context()
	cfg := runtimeConfig("q", 1)
	cfg.MaxAttempts, cfg.RetryBackoff, cfg.VisibilityTimeout = 1, time.Hour, time.Second
	q, _ := runtimeQueue(t, b, cfg)
	now := func() time.Time {
		t.Helper()
		n, err := b.Now(ctx)
		ok(t, err, "backend now")
		return n
	}
	pushed := push(t, q, "q", backends.PushRequest{Payload: []byte("failed")})
	failedBefore := now()
	ok(t, q.Retry(ctx, claimOne(t, q, "q", newOwner("w")), "boom"), "retry to the dead set")
	failedAfter := now()
	expiring := push(t, q, "q", backends.PushRequest{Payload: []byte("expired")})
	claimOne(t, q, "q", newOwner("w"))
	time.Sleep(1500 * time.Millisecond)
	expiredBefore := now()
	claimNone(t, q, "q", "the claim that sweeps the expired lease")
	expiredAfter := now()
	dead, err := q.Dead(ctx, "q", 0)
	ok(t, err, "dead")
	if len(dead) != 2 {
		t.Fatalf("dead set: %+v, want the two jobs", dead)
	}
	for _, c := range []struct {
		id       int64
		from, to time.Time
		what     string
	}{
		{pushed.ID, failedBefore, failedAfter, "a job whose last attempt failed (retry_backoff 1h)"},
		{expiring.ID, expiredBefore, expiredAfter, "a job whose lease ran out"},
	} {
		for _, j := range dead {
			if j.ID != c.id {
				continue
			}
			// Backend time in µs on every store: a microsecond of slack.
			if j.AvailableAt.Before(c.from.Add(-time.Millisecond)) || j.AvailableAt.After(c.to.Add(time.Millisecond)) {
				t.Errorf("%s: AvailableAt %s, want its time of death in [%s, %s]", c.what, j.AvailableAt.Format(time.RFC3339Nano), c.from.Format(time.RFC3339Nano), c.to.Format(time.RFC3339Nano))
			}
		}
	}
}
