package peers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
)

// pgxTx is the transaction type of River's pgx driver.
type pgxTx = pgx.Tx

// quietLogger drops River's log lines, which would interleave with the
// table.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// noopArgs is River's job kind for the no-op job every row runs.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// noopWorker counts finished jobs; done is swapped per chunk.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done atomic.Pointer[func()]
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	if f := w.done.Load(); f != nil {
		(*f)()
	}
	return nil
}

// riverSetup is River on its own schema of the run's database.
type riverSetup struct {
	pool   *pgxpool.Pool
	worker *noopWorker
	schema string
}

// newRiver migrates River into schema and returns the pool its clients
// share (sized for the largest worker count a row uses, as River's docs
// advise: a connection per worker plus its own).
func newRiver(b *testing.B, dsn, schema string, conns int) *riverSetup {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		b.Fatal(err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	return &riverSetup{pool: pool, worker: &noopWorker{}, schema: schema}
}

// client is a River client with workers workers; tuned sets the fetch
// intervals River documents for low latency (FetchCooldown 1 ms,
// FetchPollInterval 10 ms) instead of its defaults (100 ms, 1 s).
func (r *riverSetup) client(b *testing.B, workers int, tuned bool) *river.Client[pgxTx] {
	b.Helper()
	ws := river.NewWorkers()
	river.AddWorker(ws, r.worker)
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: max(workers, 1)}},
		Workers: ws,
		Schema:  r.schema,
		Logger:  quietLogger(),
	}
	if workers == 0 {
		cfg.Queues = nil // an insert-only client
		cfg.Workers = nil
	}
	if tuned {
		cfg.FetchCooldown = time.Millisecond
		cfg.FetchPollInterval = 10 * time.Millisecond
	}
	c, err := river.NewClient(riverpgxv5.New(r.pool), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// insertMany fills River's table with n no-op jobs in batches, outside
// the timed part of a drain.
func (r *riverSetup) insertMany(b *testing.B, c *river.Client[pgxTx], n int) {
	b.Helper()
	ctx := context.Background()
	batch := make([]river.InsertManyParams, 0, 1000)
	for left := n; left > 0; {
		k := min(left, 1000)
		batch = batch[:0]
		for range k {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := c.InsertManyFast(ctx, batch); err != nil {
			b.Fatal(err)
		}
		left -= k
	}
}

// drain starts a River client with workers workers on a table holding n
// jobs and times it until every job ran.
func (r *riverSetup) drain(b *testing.B, n, workers int, tuned bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	c := r.client(b, workers, tuned)
	r.insertMany(b, c, n)
	var done atomic.Int64
	all := make(chan struct{})
	f := func() {
		if done.Add(1) == int64(n) {
			close(all)
		}
	}
	r.worker.done.Store(&f)
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	took := time.Since(start)
	if err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	r.worker.done.Store(nil)
	if _, err := r.pool.Exec(ctx, `TRUNCATE `+r.schema+`.river_job`); err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkPeersPostgresQueue: River (riverpgxv5 on pgxpool) against
// coordd's postgres backend, on one PostgreSQL, each in a schema of its
// own of a database made for the run. Rows: drain 20,000 no-op jobs with
// 32 workers (River tuned, River's defaults) and with 200; push from 16
// producers (River's Insert, one job a call, against coordd's Push); and
// the idle enqueue-to-start latency (one job at a time into an idle
// worker, p50), with the floor of any push-then-claim wake-up measured
// beside it (idleFloor).
func BenchmarkPeersPostgresQueue(b *testing.B) {
	ctx := context.Background()
	dsn := testenv.PostgresDSN(b)
	rv := newRiver(b, dsn, "river_peer", 220)
	e := coorddEngine(b, fmt.Sprintf("backends:\n  p: {type: postgres, dsn: %q, schema: coordd_peer}\nqueues:\n  drain: {}\n  enq: {}\n  idle: {}\n", dsn))
	qc, err := queue.New(backendOf(b, e))
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"image":42}`)
	drainN := scale(20000) / rounds()

	coorddDrain := func(workers int) time.Duration {
		pushMany(b, qc, "drain", payload, drainN, 16)
		start := time.Now()
		if err := qc.Work(ctx, "drain", queue.WorkerOptions{Concurrency: workers, Drain: true}, func(context.Context, backends.Job) error { return nil }); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}

	b.ResetTimer()
	for range b.N {
		for _, workers := range []int{32, 200} {
			names := []string{"River tuned (FetchCooldown 1ms, FetchPollInterval 10ms)", "River defaults", "default Work"}
			if workers != 32 {
				names = []string{names[0], names[2]}
			}
			s := alternate(b, names, func(i, _ int) (int, time.Duration) {
				switch {
				case i == len(names)-1:
					return drainN, coorddDrain(workers)
				case i == 0:
					return drainN, rv.drain(b, drainN, workers, true)
				default:
					return drainN, rv.drain(b, drainN, workers, false)
				}
			})
			last := len(s) - 1
			record(row{measure: fmt.Sprintf("PostgreSQL drain, %d workers, %d jobs, jobs/s", workers, scale(20000)), unit: "jobs/s",
				peers: s[:last], coordd: s[last], target: 1.5})
			if workers == 32 {
				record(row{measure: fmt.Sprintf("PostgreSQL drain, %d workers, against River's defaults, jobs/s", workers), unit: "jobs/s",
					peers: []side{s[1]}, coordd: s[last], target: 2.0})
			}
		}

		const producers = 16
		pushN := scale(16000) / rounds()
		ins := rv.client(b, 0, false)
		pushed := alternate(b, []string{"River Insert", "Push"}, func(i, _ int) (int, time.Duration) {
			if i == 0 {
				took := concurrently(b, producers, pushN, func() error {
					_, err := ins.Insert(ctx, noopArgs{}, nil)
					return err
				})
				if _, err := rv.pool.Exec(ctx, `TRUNCATE river_peer.river_job`); err != nil {
					b.Fatal(err)
				}
				return pushN, took
			}
			took := concurrently(b, producers, pushN, func() error {
				_, err := qc.Push(ctx, "enq", payload, queue.PushOptions{})
				return err
			})
			return pushN, took
		})
		record(row{measure: fmt.Sprintf("PostgreSQL push, %d producers, jobs/s", producers), unit: "jobs/s",
			peers: pushed[:1], coordd: pushed[1], target: 1.5})

		idle := scale(200) / rounds()
		lat := alternateLatency(b, []string{"River tuned", "floor (a committed INSERT, then an UPDATE by id without the flush)", "default Work"}, func(i int) []time.Duration {
			switch i {
			case 0:
				return rv.idleLatency(b, idle)
			case 1:
				return rv.idleFloor(b, idle)
			}
			return coorddIdleLatency(b, qc, "idle", payload, idle)
		})
		record(row{measure: "PostgreSQL idle enqueue-to-start, p50", unit: "ms", latency: true,
			peers: lat[:2], coordd: lat[2], limit: 2 * time.Millisecond})
	}
}

// pushMany pushes n jobs to q from producers goroutines, outside the timed
// part of a drain.
func pushMany(b *testing.B, qc *queue.Client, q string, payload []byte, n, producers int) {
	b.Helper()
	concurrently(b, producers, n, func() error {
		_, err := qc.Push(context.Background(), q, payload, queue.PushOptions{})
		return err
	})
}

// concurrently runs one n times, spread over workers goroutines, and
// returns how long they took.
func concurrently(b *testing.B, workers, n int, one func() error) time.Duration {
	b.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := one(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// idleLatency starts a tuned River client with one worker, lets it go
// idle, then inserts n jobs one at a time, each after the previous one
// ran, and returns each insert-to-start delay.
func (r *riverSetup) idleLatency(b *testing.B, n int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	c := r.client(b, 1, true)
	started := make(chan time.Time, 1)
	f := func() { started <- time.Now() }
	r.worker.done.Store(&f)
	defer r.worker.done.Store(nil)
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Stop(ctx)
	out := make([]time.Duration, 0, n)
	for range n {
		time.Sleep(20 * time.Millisecond) // idle: past the fetch cooldown
		t0 := time.Now()
		if _, err := c.Insert(ctx, noopArgs{}, nil); err != nil {
			b.Fatal(err)
		}
		out = append(out, (<-started).Sub(t0))
	}
	return out
}

// idleFloor is the least an idle wake-up through the database can cost:
// after the same idle pause as the latency rows (which on a virtual
// machine makes every round trip slower than back to back), a
// single-row INSERT that commits with the WAL flush (a durable push) and
// then, on another connection, an UPDATE of that row by primary key that
// commits without it (a claim). It returns each pair's time.
func (r *riverSetup) idleFloor(b *testing.B, n int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS idle_floor (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, state text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	push, err := r.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer push.Release()
	claim, err := r.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer claim.Release()
	if _, err := claim.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		b.Fatal(err)
	}
	defer claim.Exec(ctx, `RESET synchronous_commit`)
	out := make([]time.Duration, 0, n)
	for range n {
		time.Sleep(20 * time.Millisecond) // the pause of the latency rows
		t0 := time.Now()
		var id int64
		if err := push.QueryRow(ctx, `INSERT INTO idle_floor (state) VALUES ('ready') RETURNING id`).Scan(&id); err != nil {
			b.Fatal(err)
		}
		if _, err := claim.Exec(ctx, `UPDATE idle_floor SET state = 'running' WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

// coorddIdleLatency runs a Work with one handler on q, lets it go idle,
// then pushes n jobs one at a time, each after the previous one started,
// and returns each push-to-start delay.
func coorddIdleLatency(b *testing.B, qc *queue.Client, q string, payload []byte, n int) []time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan time.Time, 1)
	worked := make(chan error, 1)
	go func() {
		worked <- qc.Work(ctx, q, queue.WorkerOptions{Concurrency: 1}, func(context.Context, backends.Job) error {
			started <- time.Now()
			return nil
		})
	}()
	out := make([]time.Duration, 0, n)
	for range n {
		time.Sleep(20 * time.Millisecond) // idle: the worker waits for a wake-up
		t0 := time.Now()
		if _, err := qc.Push(ctx, q, payload, queue.PushOptions{}); err != nil {
			b.Fatal(err)
		}
		select {
		case t := <-started:
			out = append(out, t.Sub(t0))
		case err := <-worked:
			b.Fatalf("Work ended: %v", err)
		}
	}
	cancel()
	if err := <-worked; err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
	return out
}

// alternateLatency runs each contender's sample once per round, rotating
// who goes first, and returns each one's p50 as a side of one operation.
func alternateLatency(b *testing.B, names []string, sample func(i int) []time.Duration) []side {
	b.Helper()
	all := make([][]time.Duration, len(names))
	for r := range rounds() {
		for k := range names {
			i := (k + r) % len(names)
			all[i] = append(all[i], sample(i)...)
		}
	}
	out := make([]side, len(names))
	for i, n := range names {
		out[i] = side{name: n, ops: 1, took: percentile(all[i], 50)}
	}
	return out
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := (len(s)*p + 99) / 100
	return s[max(k-1, 0)]
}
