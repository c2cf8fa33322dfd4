package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/sqlstore"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestHeldJobStatementsFindTheJobByID: the statements that act on one
// claimed job (ack, batched ack, extend, retry, return) reach it through
// the primary key alone, with the statistics a busy queue table really
// has: gathered while it was empty, then many jobs running. Planned from
// the other columns (queue, state), such a statement reads every running
// job of the queue, once per job acked.
func TestHeldJobStatementsFindTheJobByID(t *testing.T) {
	ctx := t.Context()
	s := busyQueueStore(t)
	queries := map[string]string{"batched ack": s.dialect.Text(qAckMany)}
	for name, q := range sqlstore.HeldJobQueries {
		queries[name] = s.dialect.Text(q)
	}
	conn := genericPlans(t, s)
	for name, q := range queries {
		plan := explainGeneric(ctx, t, conn, q, nullArgs(q))
		if !strings.Contains(plan, "coordd_queue_jobs_pkey") {
			t.Errorf("%s: the plan does not read the primary key:\n%s", name, plan)
		}
		for _, other := range []string{"Seq Scan", "queue_jobs_state", "queue_jobs_expiry", "queue_jobs_ready", "queue_jobs_claim"} {
			if strings.Contains(plan, other) {
				t.Errorf("%s: the plan reads %s:\n%s", name, other, plan)
			}
		}
	}
}

// TestClaimWalksTheReadyJobsIndex: the claim finds ready jobs in claim
// order through queue_jobs_ready, which holds the ready jobs only (so that
// a claim, which makes a job running, writes no entry into it), and never
// reads the whole table, under a busy queue's statistics; queue_jobs has
// no index that a claim would write to for nothing.
func TestClaimWalksTheReadyJobsIndex(t *testing.T) {
	ctx := t.Context()
	s := busyQueueStore(t)
	q := s.dialect.Text(qClaim)
	plan := explainGeneric(ctx, t, genericPlans(t, s), q, nullArgs(q))
	if !regexp.MustCompile(`Index Scan using coordd_queue_jobs_ready on .*coordd_queue_jobs`).MatchString(plan) {
		t.Errorf("the claim does not walk queue_jobs_ready:\n%s", plan)
	}
	if strings.Contains(plan, "Seq Scan on coordd_queue_jobs ") {
		t.Errorf("the claim reads the whole table:\n%s", plan)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'coordd' AND tablename = 'coordd_queue_jobs' ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		_, cols, ok := strings.Cut(def, " USING btree ")
		if !ok {
			t.Fatalf("index %s is not a btree: %s", name, def)
		}
		got = append(got, strings.TrimPrefix(name, "coordd_")+" USING btree "+cols)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"queue_jobs_expiry USING btree (queue, expires_at) WHERE (state = 'running'::text)",
		"queue_jobs_key USING btree (queue, unique_key, state, id) WHERE (unique_key IS NOT NULL)",
		"queue_jobs_pkey USING btree (id)",
		"queue_jobs_ready USING btree (queue, priority DESC, id) WHERE (state = 'ready'::text)",
		"queue_jobs_state USING btree (queue, state, available_at)",
		"queue_jobs_unique USING btree (queue, unique_key) WHERE (unique_key IS NOT NULL)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("indexes of queue_jobs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// busyQueueStore is a migrated store whose queue q holds 3,000 jobs, 2,000
// of them running, with the statistics gathered while it was empty: the
// state of a queue table that fills and empties, where a plan that looks
// cheap in the statistics can read every job.
func busyQueueStore(t *testing.T) *Store {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, "pg", testenv.PostgresDSN(t), "coordd", "coordd_", backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := backends.QueueConfig{Name: "q", Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3, Unique: spec.UniqueNone, MaxPayload: 1 << 20}
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	jobs := s.Table("queue_jobs")
	if _, err := s.db.ExecContext(ctx, "ANALYZE "+jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO `+jobs+` ("partition", payload, queue, priority, attempt, state, available_at, enqueued_at, last_error)
SELECT g % 4, '', 'q', 0, 0, 'ready', 0, 0, '' FROM generate_series(1, 3000) g`); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := s.Claim(ctx, "q", fmt.Sprint("w", i), 50); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// genericPlans is a connection of s that plans prepared statements
// generically, as the server does once a statement has run five times.
func genericPlans(t *testing.T, s *Store) *sql.Conn {
	t.Helper()
	conn, err := s.db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(t.Context(), "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// nullArgs is a NULL for each parameter of q.
func nullArgs(q string) string {
	n := len(regexp.MustCompile(`\$[0-9]+`).FindAllString(q, -1))
	return strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
}

// explainGeneric prepares q and returns the generic plan of executing it
// with args (a list of SQL values), then deallocates it.
func explainGeneric(ctx context.Context, t *testing.T, conn *sql.Conn, q, args string) string {
	t.Helper()
	if _, err := conn.ExecContext(ctx, "PREPARE held_probe AS "+q); err != nil {
		t.Fatalf("prepare %s: %v", q, err)
	}
	defer conn.ExecContext(ctx, "DEALLOCATE held_probe")
	rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE held_probe("+args+")")
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}
