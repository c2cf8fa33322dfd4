package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestPromiseHookOncePerEvent: "each failure event runs its on_failure
// hook once across the cluster; a leader killed in the middle of a
// delivery means the next leader delivers that event again, never that it
// is lost" (spec.md, "Failure hooks"). Two daemons share a store; a task
// fails every second, a paused task's time goes overdue, and three jobs
// die. While both daemons run, every event reaches the webhook exactly
// once and the hook command once; then the leader is killed with kill -9
// and the other takes over: every final failure in the task's history has
// reached the webhook, and no event more than a few times.
func TestPromiseHookOncePerEvent(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); hookOncePerEvent(t, "cluster: {leader_lease: 2s}\n") })
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		hookOncePerEvent(t, fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db, leader_lease: 2s}\n", testenv.MySQLDSN(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		hookOncePerEvent(t, fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd}\ncluster: {backend: db, leader_lease: 2s}\n", testenv.PostgresDSN(t)))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url, prefix := testenv.RedisURL(t)
		hookOncePerEvent(t, fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\ncluster: {backend: db, leader_lease: 2s}\n", url, prefix))
	})
}

// receiver is a webhook endpoint that counts the events it was POSTed.
type receiver struct {
	mu    sync.Mutex
	posts map[string]int    // event id -> deliveries
	kinds map[string]string // event id -> kind
	facts map[string]map[string]any
}

func newReceiver(t *testing.T) (*receiver, string) {
	r := &receiver{posts: map[string]int{}, kinds: map[string]string{}, facts: map[string]map[string]any{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ev map[string]any
		if err := json.NewDecoder(req.Body).Decode(&ev); err != nil {
			t.Errorf("webhook body: %v", err)
			return
		}
		id, _ := ev["id"].(string)
		if req.Header.Get("Idempotency-Key") != id {
			t.Errorf("Idempotency-Key %q for event %q", req.Header.Get("Idempotency-Key"), id)
		}
		r.mu.Lock()
		r.posts[id]++
		r.kinds[id], _ = ev["kind"].(string)
		r.facts[id] = ev
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// count is how many distinct events of kind arrived.
func (r *receiver) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.kinds {
		if k == kind {
			n++
		}
	}
	return n
}

// repeated lists the events delivered more than once.
func (r *receiver) repeated() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, n := range r.posts {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s x%d", id, n))
		}
	}
	sort.Strings(out)
	return out
}

func hookOncePerEvent(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	hookLog := filepath.Join(dir, "hook.log")
	rec, url := newReceiver(t)
	specPath := filepath.Join(dir, "spec.yaml")
	writeFile(t, specPath, header+fmt.Sprintf(`cron:
  fail:
    schedule: "@every 1s"
    command: "echo cannot reach the printer >&2; exit 3"
    on_failure:
      command: 'echo "$COORDD_EVENT_ID $COORDD_EVENT_KIND $COORDD_TASK" >> %s'
      webhook: {url: "%s/services/T0/SECRET", retries: 5, timeout: 2s}
  forgotten:
    schedule: "@every 1s"
    command: "true"
    paused: true
    on_failure: {webhook: "%s/hook", missed_after: 2s}
queues:
  images:
    max_attempts: 1
    on_failure: {webhook: "%s/hook"}
`, hookLog, url, url, url))
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	daemons := map[string]*proctest.Proc{}
	for _, h := range []string{"a", "b"} {
		daemons[h] = env.Start(t, h, "run", "-f", specPath, "--host-id", h, "--shutdown-grace", "2s")
	}
	defer func() {
		for _, d := range daemons {
			d.Signal(syscall.SIGTERM)
			d.Wait(t, 30*time.Second)
		}
	}()
	for i := range 3 {
		if out, code := env.Run(t, "queue", "push", "images", "-f", specPath, fmt.Sprintf("img-%d", i)); code != 0 {
			t.Fatalf("push: %s", out)
		}
	}
	if out, code := env.Run(t, "queue", "work", "images", "-f", specPath, "--drain", "--", "sh", "-c", "echo cannot decode image >&2; exit 1"); code != 0 {
		t.Fatalf("work: %d %s", code, out)
	}
	proctest.Eventually(t, 60*time.Second, "5 failed runs, 3 dead jobs and 1 missed time at the webhook", func() bool {
		return rec.count("cron.failed") >= 5 && rec.count("queue.dead") == 3 && rec.count("cron.missed") >= 1
	})

	// Both daemons up: exactly once each, by webhook and by command.
	if r := rec.repeated(); len(r) > 0 {
		t.Fatalf("events delivered more than once with both daemons up: %v", r)
	}
	if n := rec.count("cron.missed"); n != 1 {
		t.Fatalf("a paused task's overdue time gave %d missed events, want 1", n)
	}
	rec.mu.Lock()
	for id, ev := range rec.facts {
		switch ev["kind"] {
		case "queue.dead":
			if !strings.Contains(fmt.Sprint(ev["error"]), "cannot decode image") || ev["queue"] != "images" {
				t.Errorf("dead job event %s lacks its facts: %v", id, ev)
			}
		case "cron.failed":
			if ev["exit_code"] != float64(3) || !strings.Contains(fmt.Sprint(ev["output"]), "cannot reach the printer") {
				t.Errorf("failed run event %s lacks its facts: %v", id, ev)
			}
		}
	}
	rec.mu.Unlock()
	proctest.Eventually(t, 30*time.Second, "the hook command's log", func() bool {
		b, _ := os.ReadFile(hookLog)
		return strings.Count(string(b), " cron.failed fail\n") >= 5
	})
	b, _ := os.ReadFile(hookLog)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id := strings.Fields(line)[0]
		if seen[id] {
			t.Fatalf("the hook command ran twice for %s:\n%s", id, b)
		}
		seen[id] = true
	}

	// Kill the leader; the other takes over and goes on.
	leader := hostOf(status(t, env, specPath).Leader.Holder)
	daemons[leader].Kill9()
	daemons[leader].Wait(t, 10*time.Second)
	delete(daemons, leader)
	proctest.Eventually(t, 30*time.Second, "another leader", func() bool {
		st := status(t, env, specPath)
		return st.Leader != nil && hostOf(st.Leader.Holder) != leader
	})
	before := rec.count("cron.failed")
	proctest.Eventually(t, 60*time.Second, "3 more failed runs notified by the new leader", func() bool {
		return rec.count("cron.failed") >= before+3
	})

	// Every final failure in the history reached the webhook.
	out, code := env.Run(t, "cron", "history", "fail", "-f", specPath, "--json", "--limit", "200")
	if code != 0 {
		t.Fatalf("history: %s", out)
	}
	var runs []struct {
		ScheduledAt time.Time `json:"scheduled_at"`
		Attempt     int       `json:"attempt"`
		Status      string    `json:"status"`
		FinishedAt  time.Time `json:"finished_at"`
	}
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("history json: %v\n%s", err, out)
	}
	time.Sleep(12 * time.Second) // the last runs' notices: two looks
	last := map[int64]int{}      // scheduled time -> its highest attempt
	for _, r := range runs {
		k := r.ScheduledAt.UnixMicro()
		last[k] = max(last[k], r.Attempt)
	}
	for _, r := range runs {
		// A failed last attempt is final (max_attempts 1; a lost run is
		// retried once, and its retry is the last attempt).
		if r.Status != "failed" || last[r.ScheduledAt.UnixMicro()] != r.Attempt {
			continue
		}
		id := fmt.Sprintf("cron/fail/%d/%d", r.ScheduledAt.UnixMicro(), r.Attempt)
		rec.mu.Lock()
		n := rec.posts[id]
		rec.mu.Unlock()
		if n == 0 && time.Since(r.FinishedAt) > 12*time.Second {
			t.Errorf("final failure %s (finished %s) never reached the webhook", id, r.FinishedAt)
		}
	}
	for _, r := range rec.repeated() {
		if !strings.HasSuffix(r, "x2") {
			t.Errorf("an event was delivered more than twice: %s", r)
		}
	}
}
