package mysql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// Tests of the queue wake-up (queue_park.go) and of claim skip_locked,
// against the real MariaDB. Timing bounds are generous on purpose: a parked
// worker must return "well before" its 30 s park, never "within 50 ms"
// (the benchmarks measure the tight numbers).

// longPark is the max of the waits that must end early.
const longPark = 30 * time.Second

// early is how long a wait that must end early may take: far below
// longPark, far above any delay on a loaded machine.
const early = 15 * time.Second

func wakeQueueConfig(name string, claim string) backends.QueueConfig {
	return backends.QueueConfig{
		Name: name, Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		Unique: spec.UniqueNone, MaxPayload: 1 << 20, Claim: claim,
	}
}

// queueStore opens a migrated store on a fresh database with the given
// queues and returns it with the database's DSN.
func queueStore(t *testing.T, cfgs ...backends.QueueConfig) (*mysql.Store, string) {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "coordd_")
	for _, cfg := range cfgs {
		if _, err := s.PutQueue(t.Context(), cfg); err != nil {
			t.Fatalf("put queue %s: %v", cfg.Name, err)
		}
	}
	return s, dsn
}

// parked counts the statements parked in the test database.
func parked(t *testing.T, s *mysql.Store) int {
	t.Helper()
	var n int
	err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM information_schema.processlist
WHERE db = DATABASE() AND command = 'Query' AND info LIKE 'SELECT ''coordd-park:%'`).Scan(&n)
	if err != nil {
		t.Fatalf("read the processlist: %v", err)
	}
	return n
}

// waitParked waits until n statements are parked in the test database.
func waitParked(t *testing.T, s *mysql.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(early)
	for parked(t, s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d parked statements after %v, want %d", parked(t, s), early, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitUnparked waits until no statement is parked in the test database.
func waitUnparked(t *testing.T, s *mysql.Store) {
	t.Helper()
	deadline := time.Now().Add(early)
	for parked(t, s) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d statements still parked %v after the wait returned", parked(t, s), early)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startWait runs WaitQueue in the background; the channel receives its
// error, and the returned func how long it took.
func startWait(ctx context.Context, s *mysql.Store, queue string, max time.Duration) (<-chan error, func() time.Duration) {
	start := time.Now()
	var took time.Duration
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		err := s.WaitQueue(ctx, queue, max)
		mu.Lock()
		took = time.Since(start)
		mu.Unlock()
		done <- err
	}()
	return done, func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return took
	}
}

// returnsWithin waits for a wait's result and fails when it takes more than
// limit.
func returnsWithin(t *testing.T, done <-chan error, limit time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: wait queue: %v", what, err)
		}
	case <-time.After(limit):
		t.Fatalf("%s: wait queue still parked after %v", what, limit)
	}
}

func pushJob(t *testing.T, s *mysql.Store, queue string, req backends.PushRequest) backends.Job {
	t.Helper()
	j, err := s.Push(t.Context(), queue, req)
	if err != nil {
		t.Fatalf("push to %s: %v", queue, err)
	}
	return j
}

func TestQueueWakeFromOtherHandle(t *testing.T) {
	t.Parallel()
	waiter, dsn := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	pusher := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})

	done, took := startWait(t.Context(), waiter, "q", longPark)
	waitParked(t, waiter, 1) // visible in the processlist while parked
	trips := waiter.RoundTrips()
	pushJob(t, pusher, "q", backends.PushRequest{Payload: []byte("wake")})
	returnsWithin(t, done, early, "push from another handle")
	// Woken, it looked once more (and found the job).
	if n := waiter.RoundTrips() - trips; n > 2 {
		t.Errorf("the woken worker sent %d statements, want at most 2", n)
	}
	t.Logf("woken after %v", took())
	// The server may still be sending the last statement's result.
	waitUnparked(t, waiter)

	// The next wait reuses the dedicated connection: it sends its park
	// and nothing else (no CONNECTION_ID of a new connection).
	jobs, err := waiter.Claim(t.Context(), "q", "w", 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want the pushed job", jobs, err)
	}
	done, _ = startWait(t.Context(), waiter, "q", longPark)
	waitParked(t, waiter, 1)
	pushJob(t, pusher, "q", backends.PushRequest{Payload: []byte("again")})
	returnsWithin(t, done, early, "second push")
}

func TestQueueWaitIdleSendsOnlyItsPark(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	const idle = 3 * time.Second
	trips := s.RoundTrips()
	start := time.Now()
	if err := s.WaitQueue(t.Context(), "q", idle); err != nil {
		t.Fatalf("wait queue: %v", err)
	}
	took := time.Since(start)
	n := s.RoundTrips() - trips
	// The park, the first time the connection's id, and the park mark
	// (queue_park.go), written once since it lasts past the park.
	if n > 3 {
		t.Errorf("an idle wait of %v sent %d statements, want at most 3", idle, n)
	}
	if took < idle-100*time.Millisecond {
		t.Errorf("an idle wait of %v returned after %v", idle, took)
	}
	t.Logf("idle wait of %v: %d round trips", took, n)
}

func TestQueueWaitNoLostWakeup(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	// Pushed while nobody was parked: the park's own check finds it.
	pushJob(t, s, "q", backends.PushRequest{Payload: []byte("before")})
	done, took := startWait(t.Context(), s, "q", longPark)
	returnsWithin(t, done, early, "a job pushed before the wait")
	t.Logf("returned after %v", took())

	// Many pushes racing with parks: every wait returns.
	jobs, err := s.Claim(t.Context(), "q", "w", 10)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	for i := range 20 {
		done, _ := startWait(t.Context(), s, "q", longPark)
		if i%2 == 0 {
			time.Sleep(time.Duration(i) * time.Millisecond)
		}
		pushJob(t, s, "q", backends.PushRequest{Payload: []byte("race")})
		returnsWithin(t, done, early, fmt.Sprintf("race %d", i))
		jobs, err := s.Claim(t.Context(), "q", "w", 10)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("race %d: claim = %v, %v", i, jobs, err)
		}
	}
}

func TestQueueWaitBoundedByDelayedJob(t *testing.T) {
	t.Parallel()
	s, dsn := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	const delay = 2 * time.Second

	// Delayed job pushed before the wait: the park's SLEEP ends at its
	// available_at.
	j := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("later"), Delay: delay})
	done, took := startWait(t.Context(), s, "q", longPark)
	returnsWithin(t, done, early, "a delayed job")
	if now, err := s.Now(t.Context()); err != nil || now.Before(j.AvailableAt) {
		t.Errorf("returned at backend time %v, before the job's available_at %v (%v)", now, j.AvailableAt, err)
	}
	t.Logf("delayed %v: returned after %v", delay, took())
	if jobs, err := s.Claim(t.Context(), "q", "w", 1); err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want the delayed job", jobs, err)
	}

	// Delayed job pushed by another handle while the worker is parked: the
	// push wakes it, it parks again until the job's available_at.
	pusher := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
	done, took = startWait(t.Context(), s, "q", longPark)
	waitParked(t, s, 1)
	j = pushJob(t, pusher, "q", backends.PushRequest{Payload: []byte("later"), Delay: delay})
	returnsWithin(t, done, early, "a delayed job pushed while parked")
	if now, err := s.Now(t.Context()); err != nil || now.Before(j.AvailableAt) {
		t.Errorf("returned at backend time %v, before the job's available_at %v (%v)", now, j.AvailableAt, err)
	}
	t.Logf("delayed %v while parked: returned after %v", delay, took())
}

func TestQueueWaitBoundedByVisibility(t *testing.T) {
	t.Parallel()
	cfg := wakeQueueConfig("q", spec.ClaimSkipLocked)
	cfg.VisibilityTimeout = 2 * time.Second
	s, _ := queueStore(t, cfg)
	pushJob(t, s, "q", backends.PushRequest{Payload: []byte("slow")})
	first, err := s.Claim(t.Context(), "q", "first", 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim = %v, %v", first, err)
	}
	done, took := startWait(t.Context(), s, "q", longPark)
	returnsWithin(t, done, early, "a lease that expires")
	t.Logf("lease of %v: returned after %v", cfg.VisibilityTimeout, took())
	again, err := s.Claim(t.Context(), "q", "second", 1)
	if err != nil || len(again) != 1 || again[0].ID != first[0].ID || again[0].Attempt != 2 {
		t.Fatalf("claim after the lease expired = %+v, %v; want job %d attempt 2", again, err, first[0].ID)
	}
}

func TestQueueWaitCancelKeepsConnection(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	ctx, cancel := context.WithCancel(t.Context())
	done, _ := startWait(ctx, s, "q", longPark)
	waitParked(t, s, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait = %v, want context.Canceled", err)
		}
	case <-time.After(early):
		t.Fatal("cancelled wait did not return")
	}
	// The connection went back to the free list: the next wait sends only
	// its park.
	trips := s.RoundTrips()
	if err := s.WaitQueue(t.Context(), "q", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := s.RoundTrips() - trips; n != 1 {
		t.Errorf("the wait after a cancelled one sent %d statements, want 1 (its park)", n)
	}
}

func TestQueueWaitAbsentQueue(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t)
	start := time.Now()
	if err := s.WaitQueue(t.Context(), "absent", longPark); err != nil {
		t.Fatalf("wait on an absent queue: %v", err)
	}
	if d := time.Since(start); d > early {
		t.Fatalf("wait on an absent queue took %v", d)
	}
}

// TestQueueWakeOtherChanges: jobs that become ready by RequeueDead, by a
// Retry without backoff and by PutQueue moving them wake a parked worker.
func TestQueueWakeOtherChanges(t *testing.T) {
	t.Parallel()
	cfg := wakeQueueConfig("q", spec.ClaimPartition)
	cfg.MaxAttempts = 1
	retry := wakeQueueConfig("retry", spec.ClaimPartition)
	waiter, dsn := queueStore(t, cfg, retry)
	other := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
	ctx := t.Context()

	// A dead job, then RequeueDead from the other handle.
	pushJob(t, other, "q", backends.PushRequest{Payload: []byte("x")})
	jobs, err := other.Claim(ctx, "q", "w", 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	if err := other.Retry(ctx, jobs[0], "boom"); err != nil {
		t.Fatal(err)
	}
	done, _ := startWait(ctx, waiter, "q", longPark)
	waitParked(t, waiter, 1)
	if n, err := other.RequeueDead(ctx, "q"); err != nil || n != 1 {
		t.Fatalf("requeue dead = %d, %v", n, err)
	}
	returnsWithin(t, done, early, "requeue dead")

	// Retry without a backoff.
	pushJob(t, other, "retry", backends.PushRequest{Payload: []byte("x")})
	jobs, err = other.Claim(ctx, "retry", "w", 1)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	done, _ = startWait(ctx, waiter, "retry", longPark)
	waitParked(t, waiter, 1)
	if err := other.Retry(ctx, jobs[0], "again"); err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, done, early, "retry without backoff")

	// PutQueue moves jobs out of a removed partition; the job was there
	// and not claimable (claim partition takes partitions below the count).
	if _, err := waiter.Claim(ctx, "retry", "w", 1); err != nil {
		t.Fatal(err)
	}
	execSQL(t, other, "INSERT INTO `{p}queue_jobs` (queue, `partition`, payload, state, available_at, enqueued_at, last_error)\n"+
		"VALUES ('q', 9, 'stranded', 'ready', 0, 0, '')")
	execSQL(t, other, "DELETE FROM `{p}queue_jobs` WHERE queue = 'q' AND `partition` < 9")
	// The stranded job looks claimable to the park (it does not know the
	// partition count), so wait on a queue whose stranded job is delayed.
	execSQL(t, other, "UPDATE `{p}queue_jobs` SET available_at = 4000000000000000 WHERE queue = 'q'")
	done, _ = startWait(ctx, waiter, "q", longPark)
	waitParked(t, waiter, 1)
	execSQL(t, other, "UPDATE `{p}queue_jobs` SET available_at = 0 WHERE queue = 'q'")
	cfg.Partitions = 2
	if moved, err := other.PutQueue(ctx, cfg); err != nil || moved != 1 {
		t.Fatalf("put queue = %d, %v; want 1 moved", moved, err)
	}
	returnsWithin(t, done, early, "put queue moving jobs")
}

// TestQueueWakeKillDenied: a pusher whose MySQL user may see the parked
// worker (PROCESS) but not kill it (no CONNECTION ADMIN or SUPER) still
// pushes; the worker parked at the first denial wakes at its SLEEP's end,
// and from then on workers park in the bounded fallback and pick jobs up
// within about a second.
func TestQueueWakeKillDenied(t *testing.T) {
	t.Parallel()
	waiter, dsn := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	pusher := openStore(t, limitedUser(t, waiter, dsn), "coordd_", backends.Options{Version: "0.1.0"})
	ctx := t.Context()

	// The first denial: the parked worker cannot be woken; its short max
	// ends its wait.
	const short = 2 * time.Second
	done, took := startWait(ctx, waiter, "q", short)
	waitParked(t, waiter, 1)
	pushJob(t, pusher, "q", backends.PushRequest{Payload: []byte("denied")})
	returnsWithin(t, done, short+early, "wait after a denied wake-up")
	t.Logf("worker parked at the first denial returned after %v (max %v)", took(), short)
	if jobs, err := waiter.Claim(ctx, "q", "w", 1); err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want the pushed job", jobs, err)
	}

	// From now on the queue is marked: a worker parks in short SLEEPs and
	// finds the next push although nobody may kill it.
	done, took = startWait(ctx, waiter, "q", longPark)
	waitParked(t, waiter, 1)
	time.Sleep(3 * time.Second) // let the backoff reach its cap
	trips := waiter.RoundTrips()
	pushJob(t, pusher, "q", backends.PushRequest{Payload: []byte("fallback")})
	returnsWithin(t, done, early, "wait in the fallback")
	t.Logf("fallback: returned %v after parking (a few statements: %d since the push)", took(), waiter.RoundTrips()-trips)
	if jobs, err := waiter.Claim(ctx, "q", "w", 1); err != nil || len(jobs) != 1 {
		t.Fatalf("claim = %v, %v; want the pushed job", jobs, err)
	}
}

// limitedUser creates a MySQL user with every privilege on the test
// database and PROCESS (it sees other users' connections), but not
// CONNECTION ADMIN or SUPER (it may not kill them), dropped in t.Cleanup,
// and returns a DSN for it.
func limitedUser(t *testing.T, admin *mysql.Store, dsn string) string {
	t.Helper()
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	user, pass := "coordd_t_"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])
	stmts := []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, pass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%%'", cfg.DBName, user),
		fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'%%'", user),
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.DB().ExecContext(ctx, fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)); err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	for _, q := range stmts {
		if _, err := admin.DB().ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg.User, cfg.Passwd = user, pass
	return cfg.FormatDSN()
}

// Claim skip_locked.

func TestQueueSkipLockedClaim(t *testing.T) {
	t.Parallel()
	cfg := wakeQueueConfig("q", spec.ClaimSkipLocked)
	cfg.VisibilityTimeout = time.Second
	cfg.MaxAttempts = 2
	s, _ := queueStore(t, cfg)
	ctx := t.Context()

	var pushed []backends.Job
	for i := range 6 {
		pushed = append(pushed, pushJob(t, s, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "job %d", i)}))
	}
	delayed := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("later"), Delay: time.Hour})

	// A row another transaction holds is skipped, without waiting.
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM coordd_queue_jobs WHERE id = ? FOR UPDATE", pushed[0].ID); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, early)
	jobs, err := s.Claim(cctx, "q", "a", 4)
	cancel()
	if err != nil {
		t.Fatalf("claim past a locked row: %v", err)
	}
	if len(jobs) != 4 || jobs[0].ID != pushed[1].ID {
		t.Fatalf("claimed %+v, want jobs %d.. (job %d is locked)", jobs, pushed[1].ID, pushed[0].ID)
	}
	partitions := map[int]bool{}
	for i, j := range jobs {
		if j.ID != pushed[i+1].ID || j.Owner != "a" || j.Attempt != 1 || string(j.Payload) != fmt.Sprintf("job %d", i+1) ||
			!j.ExpiresAt.After(j.EnqueuedAt) {
			t.Fatalf("claimed %+v, want job %d leased to a", j, pushed[i+1].ID)
		}
		partitions[j.Partition] = true
	}
	if len(partitions) < 2 {
		t.Errorf("a skip_locked claim of keyless jobs took one partition only: %v", partitions)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The row is free again: it comes first (oldest available).
	rest, err := s.Claim(ctx, "q", "b", 10)
	if err != nil || len(rest) != 2 || rest[0].ID != pushed[0].ID || rest[1].ID != pushed[5].ID {
		t.Fatalf("claim = %+v, %v; want jobs %d and %d, not the delayed %d", rest, err, pushed[0].ID, pushed[5].ID, delayed.ID)
	}
	st, err := s.ObserveQueues(ctx, []string{"q"})
	if err != nil || st["q"].InFlight != 6 || st["q"].Ready != 1 || st["q"].Delayed != 1 {
		t.Fatalf("observed %+v, %v; want 6 in flight, 1 ready and delayed", st["q"], err)
	}

	// Ack, retry and lease expiry behave as with claim partition.
	for _, j := range jobs {
		if err := s.Ack(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ack(ctx, jobs[0]); !errors.Is(err, backends.ErrLost) {
		t.Fatalf("second ack = %v, want ErrLost", err)
	}
	if err := s.Retry(ctx, rest[0], "boom"); err != nil {
		t.Fatal(err)
	}
	again, err := s.Claim(ctx, "q", "c", 10)
	if err != nil || len(again) != 1 || again[0].ID != rest[0].ID || again[0].Attempt != 2 || again[0].LastError != "boom" {
		t.Fatalf("claim after retry = %+v, %v; want job %d attempt 2", again, err, rest[0].ID)
	}
	// Both leases run out: rest[1] is handed out again, again[0] (out of
	// attempts) goes to the dead set.
	deadline := time.Now().Add(early)
	var expired []backends.Job
	for len(expired) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("leases of 1s not expired after 15s")
		}
		time.Sleep(50 * time.Millisecond)
		if expired, err = s.Claim(ctx, "q", "d", 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(expired) != 1 || expired[0].ID != rest[1].ID || expired[0].Attempt != 2 {
		t.Fatalf("claim after expiry = %+v; want job %d attempt 2", expired, rest[1].ID)
	}
	// again[0] was leased later; its expiry is applied by a claim.
	for {
		dead, err := s.Dead(ctx, "q", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) == 1 && dead[0].ID == rest[0].ID {
			break
		}
		if len(dead) != 0 || time.Now().After(deadline) {
			t.Fatalf("dead = %+v; want job %d", dead, rest[0].ID)
		}
		time.Sleep(50 * time.Millisecond)
		if got, err := s.Claim(ctx, "q", "e", 10); err != nil || len(got) != 0 {
			t.Fatalf("claim = %+v, %v; want nothing", got, err)
		}
	}
}

// TestQueueSkipLockedPriority: claim skip_locked takes the highest
// priority first and, within one priority, the jobs in the order they
// became available (available_at, then id), never a delayed job, and
// returns them in that order.
func TestQueueSkipLockedPriority(t *testing.T) {
	t.Parallel()
	s, _ := queueStore(t, wakeQueueConfig("q", spec.ClaimSkipLocked))
	ctx := t.Context()
	late := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("late"), Priority: 5, Delay: 300 * time.Millisecond})
	b := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("b"), Priority: 5})
	low := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("low")})
	d := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("d"), Priority: 5})
	urgentLater := pushJob(t, s, "q", backends.PushRequest{Payload: []byte("urgent later"), Priority: 9, Delay: time.Hour})
	if late.Priority != 5 || low.Priority != 0 || urgentLater.Priority != 9 {
		t.Fatalf("pushed priorities %d, %d, %d; want 5, 0, 9", late.Priority, low.Priority, urgentLater.Priority)
	}
	time.Sleep(time.Until(late.AvailableAt) + 100*time.Millisecond)
	jobs, err := s.Claim(ctx, "q", "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	// late has the lowest id of priority 5 but became available last.
	if want := []int64{b.ID, d.ID, late.ID, low.ID}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v (not the delayed %d)", got, want, urgentLater.ID)
	}
	for i, want := range []int{5, 5, 5, 0} {
		if jobs[i].Priority != want {
			t.Fatalf("claimed job %d with priority %d, want %d", jobs[i].ID, jobs[i].Priority, want)
		}
	}
}

// TestQueueSkipLockedConcurrent: claimers on separate handles, with pushes
// going on, never hold one job at once, and every job is claimed exactly
// once.
func TestQueueSkipLockedConcurrent(t *testing.T) {
	t.Parallel()
	for _, claim := range []string{spec.ClaimSkipLocked, spec.ClaimPartition} {
		t.Run(claim, func(t *testing.T) {
			t.Parallel()
			cfg := wakeQueueConfig("q", claim)
			cfg.VisibilityTimeout = 10 * time.Minute // no lease expires during the test
			s, dsn := queueStore(t, cfg)
			const jobs, workers = 600, 6
			ctx := t.Context()

			var mu sync.Mutex
			pushed := map[int64]bool{}
			pushOne := func(st *mysql.Store, i int) error {
				key := ""
				if i%3 == 0 {
					key = fmt.Sprintf("k%d", i%7)
				}
				j, err := st.Push(ctx, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "%d", i), Key: key})
				if err != nil {
					return err
				}
				mu.Lock()
				pushed[j.ID] = true
				mu.Unlock()
				return nil
			}
			for i := range jobs / 2 {
				if err := pushOne(s, i); err != nil {
					t.Fatal(err)
				}
			}

			held := map[int64]string{}  // claimed and not yet acked
			acked := map[int64]string{} // by owner
			var wg sync.WaitGroup
			errs := make(chan error, workers+1)
			wg.Go(func() { // the other half, while the workers claim
				for i := jobs / 2; i < jobs; i++ {
					if err := pushOne(s, i); err != nil {
						errs <- err
						return
					}
				}
			})
			deadline := time.Now().Add(2 * time.Minute)
			for w := range workers {
				ws := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
				owner := fmt.Sprintf("w%d", w)
				wg.Go(func() {
					errs <- func() error {
						for {
							mu.Lock()
							n := len(acked)
							mu.Unlock()
							if n == jobs {
								return nil
							}
							if time.Now().After(deadline) {
								return fmt.Errorf("%s: %d of %d jobs acked after 2 minutes", owner, n, jobs)
							}
							got, err := ws.Claim(ctx, "q", owner, 1+w%4)
							if err != nil {
								return err
							}
							mu.Lock()
							for _, j := range got {
								if other, ok := held[j.ID]; ok {
									mu.Unlock()
									return fmt.Errorf("job %d claimed by %s while %s holds it", j.ID, owner, other)
								}
								if other, ok := acked[j.ID]; ok {
									mu.Unlock()
									return fmt.Errorf("job %d claimed by %s after %s acked it", j.ID, owner, other)
								}
								held[j.ID] = owner
							}
							mu.Unlock()
							for _, j := range got {
								if err := ws.Ack(ctx, j); err != nil {
									return fmt.Errorf("%s: ack %d: %w", owner, j.ID, err)
								}
								mu.Lock()
								delete(held, j.ID)
								acked[j.ID] = owner
								mu.Unlock()
							}
							if len(got) == 0 {
								time.Sleep(time.Millisecond)
							}
						}
					}()
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(pushed) != jobs || len(acked) != jobs {
				t.Fatalf("%d pushed, %d acked; want %d", len(pushed), len(acked), jobs)
			}
			for id := range pushed {
				if _, ok := acked[id]; !ok {
					t.Fatalf("job %d was never acked", id)
				}
			}
			st, err := s.ObserveQueues(ctx, []string{"q"})
			if err != nil || st["q"].Jobs() != 0 {
				t.Fatalf("observed %+v, %v; want an empty queue", st["q"], err)
			}
		})
	}
}

// TestQueueClaimGroups claims from one Store with many goroutines at once,
// so that their claims go together in one script (the claim batcher):
// each caller gets only jobs leased to its own owner token, at most its
// max, and no job goes to two callers, in both claim modes.
func TestQueueClaimGroups(t *testing.T) {
	t.Parallel()
	for _, claim := range []string{spec.ClaimSkipLocked, spec.ClaimPartition} {
		t.Run(claim, func(t *testing.T) {
			t.Parallel()
			cfg := wakeQueueConfig("q", claim)
			cfg.VisibilityTimeout = 10 * time.Minute
			s, _ := queueStore(t, cfg)
			ctx := t.Context()
			const jobs, claimers = 300, 8
			for i := range jobs {
				pushJob(t, s, "q", backends.PushRequest{Payload: fmt.Appendf(nil, "%d", i)})
			}
			var mu sync.Mutex
			got := map[int64]string{}
			var wg sync.WaitGroup
			errs := make(chan error, claimers)
			for c := range claimers {
				wg.Go(func() {
					errs <- func() error {
						for i := 0; ; i++ {
							owner := fmt.Sprintf("c%d-%d", c, i)
							max := 1 + c%3
							js, err := s.Claim(ctx, "q", owner, max)
							if err != nil {
								return err
							}
							if len(js) > max {
								return fmt.Errorf("%s asked for %d, got %d", owner, max, len(js))
							}
							mu.Lock()
							for _, j := range js {
								if j.Owner != owner {
									mu.Unlock()
									return fmt.Errorf("%s got job %d leased to %q", owner, j.ID, j.Owner)
								}
								if other, ok := got[j.ID]; ok {
									mu.Unlock()
									return fmt.Errorf("job %d claimed by %s and %s", j.ID, other, owner)
								}
								got[j.ID] = owner
							}
							n := len(got)
							mu.Unlock()
							for _, j := range js {
								if err := s.Ack(ctx, j); err != nil {
									return fmt.Errorf("%s: ack %d: %w", owner, j.ID, err)
								}
							}
							if n == jobs {
								return nil
							}
							if len(js) == 0 {
								time.Sleep(time.Millisecond) // another claimer holds the jobs left
							}
						}
					}()
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != jobs {
				t.Fatalf("%d jobs claimed, want %d", len(got), jobs)
			}
			st, err := s.ObserveQueues(ctx, []string{"q"})
			if err != nil {
				t.Fatal(err)
			}
			if q := st["q"]; q.Ready+q.InFlight+q.Dead != 0 {
				t.Fatalf("after acking every job: %+v", q)
			}
		})
	}
}

// TestQueueClaimSeesConfigChange: a Store claims with the config it last
// read; after another Store changes the config (the visibility timeout,
// then the claim mode), the next claim leases under the new one.
func TestQueueClaimSeesConfigChange(t *testing.T) {
	t.Parallel()
	cfg := wakeQueueConfig("q", spec.ClaimSkipLocked)
	cfg.VisibilityTimeout = 10 * time.Minute
	s, dsn := queueStore(t, cfg)
	other := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	leaseOf := func(owner string) time.Duration {
		t.Helper()
		pushJob(t, s, "q", backends.PushRequest{Payload: []byte("x")})
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		js, err := s.Claim(ctx, "q", owner, 1)
		if err != nil || len(js) != 1 {
			t.Fatalf("claim as %s: %v %v", owner, js, err)
		}
		if err := s.Ack(ctx, js[0]); err != nil {
			t.Fatal(err)
		}
		return js[0].ExpiresAt.Sub(now)
	}
	if d := leaseOf("a"); d < 9*time.Minute || d > 11*time.Minute {
		t.Fatalf("lease of %v, want about 10m", d)
	}
	cfg.VisibilityTimeout = time.Hour
	if _, err := other.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if d := leaseOf("b"); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("lease of %v after the change, want about 1h", d)
	}
	cfg.Claim = spec.ClaimPartition
	if _, err := other.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if d := leaseOf("c"); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("lease of %v in mode partition, want about 1h", d)
	}
	if err := other.DeleteQueue(ctx, "q", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "q", "d", 1); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("claim from a deleted queue: %v, want ErrNotFound", err)
	}
}

// TestQueueWaitKeyBlocked: under claim partition, a job waiting behind an
// earlier job of its key is not claimable, so an idle worker parks rather
// than returning at once (and spinning on empty claims); the ack of the
// earlier job, from another handle, wakes it, and it claims the next job.
func TestQueueWaitKeyBlocked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	waiter, dsn := queueStore(t, wakeQueueConfig("q", spec.ClaimPartition))
	worker := openStore(t, dsn, "coordd_", backends.Options{Version: "0.1.0"})
	pushJob(t, worker, "q", backends.PushRequest{Payload: []byte("k1"), Key: "k"})
	k2 := pushJob(t, worker, "q", backends.PushRequest{Payload: []byte("k2"), Key: "k"})
	held, err := worker.Claim(ctx, "q", "worker", 1)
	if err != nil || len(held) != 1 {
		t.Fatalf("worker's claim = %v, %v; want k1", held, err)
	}
	if jobs, err := waiter.Claim(ctx, "q", "waiter", 5); err != nil || len(jobs) != 0 {
		t.Fatalf("waiter's claim = %v, %v; want nothing while k1 runs", jobs, err)
	}
	done, took := startWait(ctx, waiter, "q", longPark)
	waitParked(t, waiter, 1)
	select {
	case err := <-done:
		t.Fatalf("the wait returned (%v) while k2 waits behind k1", err)
	default:
	}
	if err := worker.Ack(ctx, held[0]); err != nil {
		t.Fatalf("ack k1: %v", err)
	}
	returnsWithin(t, done, early, "ack of k1 from another handle")
	t.Logf("woken after %v", took())
	if jobs, err := waiter.Claim(ctx, "q", "waiter", 5); err != nil || len(jobs) != 1 || jobs[0].ID != k2.ID {
		t.Fatalf("claim after the ack = %v, %v; want k2 (%d)", jobs, err, k2.ID)
	}
}
