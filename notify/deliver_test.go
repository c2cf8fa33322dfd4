package notify

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/spec"
)

func testEvent() Event {
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	code := 3
	return Event{ID: "cron/report/1/1", Kind: KindCronFailed, Object: "cron.report", At: at, Task: "report",
		ScheduledAt: &at, Attempt: 1, Status: "failed", ExitCode: &code, Error: "exit status 3", RunID: "r1"}
}

// TestWebhookRetriesServerErrors: a 5xx answer is retried with the same
// body and event id; the first 2xx ends the delivery.
func TestWebhookRetriesServerErrors(t *testing.T) {
	var calls atomic.Int32
	var bodies []Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || r.Method != http.MethodPost ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Idempotency-Key") != ev.ID ||
			r.Header.Get("Authorization") != "Bearer t0ken" {
			t.Errorf("bad request: %s %v %v", r.Method, r.Header, err)
		}
		bodies = append(bodies, ev)
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	d := &Deliverer{Backoff: time.Millisecond}
	h := &spec.Hook{Webhook: &spec.Webhook{URL: srv.URL + "/hook", Headers: map[string]string{"Authorization": "Bearer t0ken"}, Timeout: time.Second, Retries: 3}}
	if err := d.Deliver(t.Context(), h, testEvent()); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if calls.Load() != 3 || bodies[0].ID != bodies[2].ID || bodies[2].Task != "report" || *bodies[2].ExitCode != 3 {
		t.Fatalf("%d calls, bodies %+v", calls.Load(), bodies)
	}
}

// TestWebhookRefusalIsNotRetriedAndHidesTheURL: a 4xx answer ends the
// delivery at once; no error names the URL's path or query, where a
// webhook's secret lives; a redirect is not followed.
func TestWebhookRefusalIsNotRetriedAndHidesTheURL(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	d := &Deliverer{Backoff: time.Millisecond}
	for _, path := range []string{"/services/SECRET?token=SECRET", "/moved"} {
		calls.Store(0)
		h := &spec.Hook{Webhook: &spec.Webhook{URL: srv.URL + path, Timeout: time.Second, Retries: 3}}
		err := d.Deliver(t.Context(), h, testEvent())
		if err == nil || calls.Load() != 1 || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "elsewhere") {
			t.Fatalf("%s: err %v after %d calls", path, err, calls.Load())
		}
	}
	// A server that is gone: the client's error would quote the URL.
	srv.Close()
	h := &spec.Hook{Webhook: &spec.Webhook{URL: srv.URL + "/services/SECRET", Timeout: time.Second, Retries: 1}}
	if err := d.Deliver(t.Context(), h, testEvent()); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("unreachable: %v", err)
	}
}

// TestWebhookTimeoutPerAttempt: an answer slower than the timeout fails
// the attempt, and the retries follow.
func TestWebhookTimeoutPerAttempt(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	d := &Deliverer{Backoff: time.Millisecond}
	h := &spec.Hook{Webhook: &spec.Webhook{URL: srv.URL, Timeout: 50 * time.Millisecond, Retries: 1}}
	err := d.Deliver(t.Context(), h, testEvent())
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") || calls.Load() != 2 {
		t.Fatalf("err %v after %d calls", err, calls.Load())
	}
}

// TestHookCommandGetsTheEvent: the command reads the event in its
// environment, the hook's env is there, the backends' secrets are not, and
// a failure reports the exit status with the command's output.
func TestHookCommandGetsTheEvent(t *testing.T) {
	t.Setenv("DB_PASSWORD", "hunter2")
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	d := &Deliverer{Unset: func() []string { return []string{"DB_PASSWORD"} }}
	h := &spec.Hook{
		Command: &spec.Command{Shell: `env > ` + out + `; echo "$COORDD_EVENT" >> ` + out + `; echo cannot page >&2; exit 4`},
		Env:     map[string]string{"TEAM": "ops"}, Timeout: 10 * time.Second,
	}
	err := d.Deliver(t.Context(), h, testEvent())
	if err == nil || !strings.Contains(err.Error(), "exit status 4") || !strings.Contains(err.Error(), "cannot page") {
		t.Fatalf("err = %v", err)
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	env := string(b)
	for _, want := range []string{"COORDD_EVENT_ID=cron/report/1/1", "COORDD_EVENT_KIND=cron.failed", "COORDD_TASK=report",
		"COORDD_ATTEMPT=1", "COORDD_RUN_ID=r1", "TEAM=ops", `"exit_code":3`} {
		if !strings.Contains(env, want) {
			t.Errorf("the command's environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "hunter2") {
		t.Errorf("the command inherited a backend secret:\n%s", env)
	}
}

// TestHookCommandTimeout: a command past the hook's timeout is stopped and
// reported as timed out.
func TestHookCommandTimeout(t *testing.T) {
	d := &Deliverer{}
	h := &spec.Hook{Command: &spec.Command{Argv: []string{"sleep", "30"}}, Timeout: 100 * time.Millisecond}
	start := time.Now()
	err := d.Deliver(t.Context(), h, testEvent())
	if err == nil || !strings.Contains(err.Error(), "timed out") || time.Since(start) > 20*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}
