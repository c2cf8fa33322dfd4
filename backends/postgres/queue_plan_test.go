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

	queries := map[string]string{"batched ack": s.dialect.Text(qAckMany)}
	for name, q := range sqlstore.HeldJobQueries {
		queries[name] = s.dialect.Text(q)
	}
	param := regexp.MustCompile(`\$[0-9]+`)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for name, q := range queries {
		n := len(param.FindAllString(q, -1))
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
		plan := explainGeneric(ctx, t, conn, q, nulls)
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
