package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/backends/postgres"
	"github.com/coordd/coordd/backends/redis"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/metrics"
)

// Promises of docs/operations.md ("Metrics and health") on every backend:
// the tests beside this file read the embedded store only. Queue readings
// are left to the queue tests (ready counts, TestQueueCountsAgree).

// store is a backend under test with what its type can do.
type store interface {
	backends.Backend
	backends.Semaphores
}

func openEvery(t *testing.T) map[string]func(t *testing.T) store {
	ctx := context.Background()
	opts := backends.Options{Version: "test"}
	return map[string]func(t *testing.T) store{
		"sqlite": func(t *testing.T) store {
			s := openStore(t)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"mysql": func(t *testing.T) store {
			s, err := mysql.Open(ctx, "db", testenv.MySQLDSN(t), "coordd_", opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		},
		"postgres": func(t *testing.T) store {
			s, err := postgres.Open(ctx, "pg", testenv.PostgresDSN(t), "coordd", "coordd_", opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) store {
			url, prefix := testenv.RedisURL(t)
			s, err := redis.Open(ctx, "cache", url, prefix, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"memcached": func(t *testing.T) store {
			addr, prefix := testenv.MemcachedAddr(t)
			s, err := memcached.Open(ctx, "mc", []string{addr}, prefix, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// TestPromiseSemaphoreMetricsEveryBackend: "coordd_semaphore_limit,
// coordd_semaphore_holders ... read from the backend at scrape time", and
// coordd_backend_observe_successful 1, on every backend that holds
// semaphores; and coordd_hosts by state on every cluster backend's host
// registry.
func TestPromiseSemaphoreMetricsEveryBackend(t *testing.T) {
	for typ, open := range openEvery(t) {
		t.Run(typ, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			cfg := backends.SemaphoreConfig{Name: "s", Limit: 4, Lease: 10 * time.Second, Mode: "lease", MaxWaiting: -1}
			if err := st.PutSemaphore(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := st.TryAcquire(ctx, backends.SemRef{Name: "s"}, backends.AcquireRequest{Owner: fmt.Sprint("o", i), Host: "h", PID: 1, Lease: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			name := st.Name()
			src := &hostSource{source: source{objs: []metrics.Objects{{Backend: name, B: st, Semaphores: []string{"s"}}}}, local: "aaaaaaaaaaaaaaaa"}
			want := []string{
				fmt.Sprintf(`coordd_backend_observe_successful{backend=%q} 1`, name),
				fmt.Sprintf(`coordd_semaphore_limit{backend=%q,semaphore="s"} 4`, name),
				fmt.Sprintf(`coordd_semaphore_holders{backend=%q,semaphore="s"} 3`, name),
			}
			if reg := st.Cluster(); reg != nil {
				src.reg = reg
				for _, h := range []struct {
					host    string
					stopped bool
				}{{"a", false}, {"b", false}, {"c", true}} {
					if err := reg.Heartbeat(ctx, backends.HostRecord{Host: h.host, RunID: h.host + "/1", SpecHash: "aaaaaaaaaaaaaaaa", HeartbeatEvery: time.Minute, Stopped: h.stopped}); err != nil {
						t.Fatal(err)
					}
				}
				want = append(want, `coordd_hosts{state="live"} 2`, `coordd_hosts{state="stopped"} 1`, `coordd_hosts_spec_hashes 1`)
			}
			_, body := get(t, serve(t, metrics.New(src))+"/metrics")
			for _, l := range want {
				if !hasLine(body, l) {
					t.Errorf("no line %q in /metrics:\n%s", l, body)
				}
			}
		})
	}
}

// TestPromiseScrapeBoundedBySlowBackend: "Semaphores and queues are
// observed ... bounded by 3 s: a slow backend shows as
// coordd_backend_observe_successful 0 and does not hang the scrape". The
// slow backend is a real server whose semaphore tables another session
// holds locked, so every read of them waits: on MariaDB under LOCK TABLES
// ... WRITE, on PostgreSQL under LOCK TABLE ... IN ACCESS EXCLUSIVE MODE in
// an open transaction.
func TestPromiseScrapeBoundedBySlowBackend(t *testing.T) {
	ctx := context.Background()
	t.Run("mysql", func(t *testing.T) {
		dsn := testenv.MySQLDSN(t)
		st, err := mysql.Open(ctx, "db", dsn, "coordd_", backends.Options{Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		scrapeBoundedBySlowBackend(t, st, func() func() {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "LOCK TABLES coordd_semaphores WRITE, coordd_semaphore_slots WRITE, coordd_semaphore_waiters WRITE"); err != nil {
				t.Fatal(err)
			}
			return func() {
				defer conn.Close()
				if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.PostgresDSN(t)
		st, err := postgres.Open(ctx, "db", dsn, "coordd", "coordd_", backends.Options{Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		scrapeBoundedBySlowBackend(t, st, func() func() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			tables := st.Table("semaphores") + ", " + st.Table("semaphore_slots") + ", " + st.Table("semaphore_waiters")
			if _, err := tx.ExecContext(ctx, "LOCK TABLE "+tables+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				_ = tx.Rollback()
				t.Fatal(err)
			}
			return func() {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

// scrapeBoundedBySlowBackend migrates st, a backend named db, and scrapes
// its semaphore s before, while and after lock holds its semaphore tables
// (until the function lock returns is called).
func scrapeBoundedBySlowBackend(t *testing.T, st interface {
	store
	backends.Migrator
}, lock func() (unlock func())) {
	t.Helper()
	ctx := context.Background()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "s", Limit: 2, Lease: 10 * time.Second, Mode: "lease", MaxWaiting: -1}); err != nil {
		t.Fatal(err)
	}
	src := &source{objs: []metrics.Objects{{Backend: "db", B: st, Semaphores: []string{"s"}}}}
	base := serve(t, metrics.New(src))
	if _, body := get(t, base+"/metrics"); !hasLine(body, `coordd_backend_observe_successful{backend="db"} 1`) {
		t.Fatalf("before the stall:\n%s", body)
	}

	unlock := lock()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		unlock()
		t.Fatalf("a scrape while the backend stalls did not answer: %v", err)
	}
	body := readAll(t, resp)
	unlock()
	if resp.StatusCode != http.StatusOK || !hasLine(body, `coordd_backend_observe_successful{backend="db"} 0`) {
		t.Fatalf("scrape while the backend stalls = %d:\n%s", resp.StatusCode, body)
	}
	if _, body := get(t, base+"/metrics"); !hasLine(body, `coordd_backend_observe_successful{backend="db"} 1`) {
		t.Fatalf("after the stall:\n%s", body)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPromiseLatenessFirstAttemptsOnly: coordd_cron_lateness_seconds is
// "start minus scheduled time of first attempts started on this host":
// retries, late by their backoff, are left out.
func TestPromiseLatenessFirstAttemptsOnly(t *testing.T) {
	m := metrics.New(&source{})
	at := time.Now().Add(-time.Minute)
	m.CronStarted("t", at, 1, at.Add(2*time.Second))
	m.CronStarted("t", at, 2, time.Now())
	_, body := get(t, serve(t, m)+"/metrics")
	for _, l := range []string{`coordd_cron_lateness_seconds_count{task="t"} 1`, `coordd_cron_lateness_seconds_sum{task="t"} 2`} {
		if !hasLine(body, l) {
			t.Errorf("no line %q in /metrics:\n%s", l, body)
		}
	}
}
