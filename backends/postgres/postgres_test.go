package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore opens a handle on dsn, in schema with the default prefix,
// closed by t.Cleanup.
func openStore(t testing.TB, dsn, schema string, opts backends.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), "pg", dsn, schema, "coordd_", opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// execSQL runs raw SQL behind coordd's back; {t}name is the store's table
// name.
func execSQL(t *testing.T, b backends.Backend, query string, args ...any) {
	t.Helper()
	if _, err := b.(*postgres.Store).DB().ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T) func() backends.Backend {
			dsn := testenv.PostgresDSN(t)
			return func() backends.Backend { return openStore(t, dsn, "coordd", backends.Options{Version: "0.1.0"}) }
		},
		DeleteSlot: func(t *testing.T, b backends.Backend, name string, slot int) {
			s := b.(*postgres.Store)
			execSQL(t, b, `DELETE FROM `+s.Table("semaphore_slots")+` WHERE name = $1 AND slot = $2`, name, slot)
		},
		InstanceRows: instanceRows,
		InsertJobs: func(t *testing.T, b backends.Backend, queue string, p, n int) {
			s := b.(*postgres.Store)
			for i := range n {
				execSQL(t, b, `INSERT INTO `+s.Table("queue_jobs")+` (queue, "partition", payload, state, available_at, enqueued_at)
VALUES ($1, $2, $3, 'ready', 0, 0)`, queue, p, []byte(fmt.Sprintf("job %d", i)))
			}
		},
		ClockFencing: true,
		// Mode session: slots are advisory locks of the holder's
		// connection; ending the backend frees them.
		SemaphoreModes: []string{spec.ModeSession},
		KillSession: func(t *testing.T, b backends.Backend, id int64) {
			execSQL(t, b, `SELECT pg_terminate_backend($1)`, id)
		},
	}
}

func TestConformance(t *testing.T) { backendtest.Run(t, harness()) }

// instanceRows lists the rows of every instance of keyed semaphore name,
// whatever their state.
func instanceRows(t *testing.T, b backends.Backend, name string) []string {
	t.Helper()
	s := b.(*postgres.Store)
	rows, err := s.DB().QueryContext(t.Context(), `
SELECT 'slot ' || ikey || ' ' || slot || ' ' || owner FROM `+s.Table("semaphore_instance_slots")+` WHERE name = $1
UNION ALL SELECT 'waiter ' || ikey || ' ' || owner FROM `+s.Table("semaphore_instance_waiters")+` WHERE name = $1`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
