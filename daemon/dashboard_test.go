package daemon_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/browsertest"
	"github.com/coordd/coordd/internal/proctest"
)

// listenURL waits for the daemon's log to say where it listens.
func listenURL(t *testing.T, d *proctest.Proc) string {
	t.Helper()
	var m []string
	proctest.Eventually(t, 20*time.Second, "the listen address in the log", func() bool {
		m = listenAddr.FindStringSubmatch(d.Output())
		return m != nil
	})
	return "http://" + m[1]
}

// TestDashboardServedAndRunNow runs `coordd run --listen` with dashboard
// actions and checks, in Chromium, that the dashboard is at / beside
// /metrics and /healthz on the one listener, and that "Run now" runs the
// task on the daemon's host as a manual run: the command runs, the task's
// history shows the run with its exit code and output, and the daemon's
// log names the token that asked; shutdown lets a manual run finish. A
// dashboard on another address than loopback is warned about,
// --dashboard=false leaves /metrics only, and the action flags without
// what they need stop the start.
func TestDashboardServedAndRunNow(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	ran := filepath.Join(dir, "ran")
	slow := filepath.Join(dir, "slow")
	writeFile(t, specPath, `cron:
  report:
    schedule: "0 0 1 1 *"
    command: ["sh", "-c", "echo ran >> `+ran+`; echo hello-from-report"]
  slow:
    schedule: "0 0 1 1 *"
    command: ["sh", "-c", "sleep 1; echo done >> `+slow+`"]
`)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops:0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0",
		"--dashboard-actions", "--dashboard-token-file", tokens)
	base := listenURL(t, d)
	proctest.Eventually(t, 20*time.Second, "the leader's apply", func() bool { return strings.Contains(d.Output(), "apply done") })
	if !strings.Contains(d.Output(), "dashboard="+base+"/") {
		t.Errorf("the start-up log does not give the dashboard's URL %s/:\n%s", base, d.Output())
	}
	if code, body := scrape(t, base+"/metrics"); code != 200 || !strings.Contains(body, "coordd_leader ") {
		t.Errorf("/metrics: %d", code)
	}
	if code, body := scrape(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	p := browsertest.Start(t).NewPage(t)
	p.Navigate(base + "/")
	if text := p.Text(); !strings.Contains(text, "Cluster") || !strings.Contains(text, "solo") {
		t.Fatalf("/ is not the dashboard:\n%s", text)
	}
	p.Navigate(base + "/login")
	p.Fill("input[name=token]", "0123456789abcdef0123456789abcdef")
	if err := p.Submit("#login"); err != nil {
		t.Fatal(err)
	}
	p.Navigate(base + "/cron/report")
	if err := p.Submit("button[data-action=run]"); err != nil {
		t.Fatal(err)
	}
	if text := p.Text(); !strings.Contains(text, "cron.report started on solo as a manual run") {
		t.Errorf("after Run now the page says:\n%s", text)
	}
	proctest.Eventually(t, 20*time.Second, "the manual run's command", func() bool {
		b, _ := os.ReadFile(ran)
		return string(b) == "ran\n"
	})
	proctest.Eventually(t, 20*time.Second, "the manual run in the history", func() bool {
		p.Navigate(base + "/cron/report")
		text := p.Text()
		return strings.Contains(text, "manual") && strings.Contains(text, "succeeded") && strings.Contains(text, "hello-from-report")
	})
	if !regexp.MustCompile(`dashboard action: action=cron\.run object=report remote=127\.0\.0\.1:\d+ .*token_id=ops at=\S+`).MatchString(d.Output()) {
		t.Errorf("Run now is not in the daemon's log with who and when:\n%s", d.Output())
	}
	// A manual run started just before SIGTERM finishes within the grace.
	p.Navigate(base + "/cron/slow")
	if err := p.Submit("button[data-action=run]"); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Errorf("daemon exited %d", code)
	}
	if b, _ := os.ReadFile(slow); string(b) != "done\n" {
		t.Errorf("the manual run started before SIGTERM did not finish: %q\n%s", b, d.Output())
	}

	// On another address than loopback the log warns that reading needs
	// no login.
	wide := env.Start(t, "wide", "run", "-f", specPath, "--host-id", "solo", "--listen", "0.0.0.0:0")
	proctest.Eventually(t, 20*time.Second, "the warning about a non-loopback dashboard", func() bool {
		return strings.Contains(wide.Output(), "the dashboard shows job payloads")
	})
	wide.Signal(syscall.SIGTERM)
	wide.Wait(t, 30*time.Second)

	off := env.Start(t, "off", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0", "--dashboard=false")
	base = listenURL(t, off)
	if code, _ := scrape(t, base+"/"); code != 404 {
		t.Errorf("/ with --dashboard=false: %d", code)
	}
	if code, _ := scrape(t, base+"/metrics"); code != 200 {
		t.Errorf("/metrics with --dashboard=false: %d", code)
	}
	off.Signal(syscall.SIGTERM)
	off.Wait(t, 30*time.Second)

	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0", "--dashboard-actions"},
		{"--dashboard-actions", "--dashboard-token-file", tokens},
		{"--listen", "127.0.0.1:0", "--dashboard=false", "--dashboard-actions", "--dashboard-token-file", tokens},
	} {
		out, code := env.Run(t, append([]string{"run", "-f", specPath, "--host-id", "solo"}, args...)...)
		if code != 1 || !strings.Contains(out, "dashboard") {
			t.Errorf("coordd run %v: exit %d\n%s", args, code, out)
		}
	}
}
