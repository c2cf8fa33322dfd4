package daemon_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
)

// TestIdleConnectionsLeaveDescriptors runs `coordd run --listen` under a
// limit of 256 file descriptors and opens 400 connections that each send
// a keep-alive request and then stay idle, as a careless or hostile client
// would. The daemon keeps its descriptors for its own work: /healthz
// answers a new connection, an `@every 1s` task keeps running, a SIGHUP
// reload takes a new task, and nothing fails for want of a descriptor.
func TestIdleConnectionsLeaveDescriptors(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	ticks, second := filepath.Join(dir, "ticks"), filepath.Join(dir, "second")
	task := func(name, file string) string {
		return fmt.Sprintf("  %s:\n    schedule: \"@every 1s\"\n    command: [\"sh\", \"-c\", \"echo x >> %s\"]\n", name, file)
	}
	writeFile(t, specPath, "cron:\n"+task("tick", ticks))
	sh := *env
	sh.Bin = "/bin/sh"
	d := sh.Start(t, "daemon", "-c", `ulimit -n 256 && exec "$0" "$@"`, env.Bin,
		"run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0")
	base := listenURL(t, d)
	lines := func(path string) int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "\n")
	}
	proctest.Eventually(t, 30*time.Second, "the first tick", func() bool { return lines(ticks) > 0 })

	addr := strings.TrimPrefix(base, "http://")
	for i := range 400 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}

	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz on a new connection after 400 idle ones: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz after 400 idle connections: %d %q", resp.StatusCode, body)
	}
	before := lines(ticks)
	proctest.Eventually(t, 30*time.Second, "three more ticks after 400 idle connections", func() bool { return lines(ticks) >= before+3 })

	writeFile(t, specPath, "cron:\n"+task("tick", ticks)+task("second", second))
	d.Signal(syscall.SIGHUP)
	proctest.Eventually(t, 30*time.Second, "the task the reload added", func() bool { return lines(second) > 0 })

	if out := d.Output(); strings.Contains(out, "too many open files") {
		t.Errorf("the daemon ran out of descriptors:\n%s", out)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(t, 30*time.Second); code != 0 {
		t.Errorf("daemon exited %d", code)
	}
}

// TestDashboardAnswersOnlyItsHosts runs `coordd run --listen` with
// --dashboard-host: the dashboard answers to the names given (repeated or
// comma-separated) and to its address, and refuses another Host with 421,
// while /metrics and /healthz answer any Host (a scraper names the server
// as its service discovery does). A bad name, or the flag without the
// dashboard, stops the start.
func TestDashboardAnswersOnlyItsHosts(t *testing.T) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFile(t, specPath, "semaphores:\n  s: {limit: 1}\n")
	d := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "solo", "--listen", "127.0.0.1:0",
		"--dashboard-host", "dash.example,ops.example", "--dashboard-host", "web-1.internal")
	base := listenURL(t, d)
	get := func(path, host string) int {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s with Host %s: %v", path, host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, host string
		code       int
	}{
		{"/", strings.TrimPrefix(base, "http://"), http.StatusOK},
		{"/", "dash.example:9464", http.StatusOK},
		{"/", "ops.example", http.StatusOK},
		{"/semaphores", "web-1.internal", http.StatusOK},
		{"/", "evil.example", http.StatusMisdirectedRequest},
		{"/semaphores", "evil.example:9464", http.StatusMisdirectedRequest},
		{"/metrics", "evil.example", http.StatusOK},
		{"/healthz", "evil.example", http.StatusOK},
	} {
		if code := get(tc.path, tc.host); code != tc.code {
			t.Errorf("GET %s with Host %s: %d, want %d", tc.path, tc.host, code, tc.code)
		}
	}
	d.Signal(syscall.SIGTERM)
	d.Wait(t, 30*time.Second)

	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0", "--dashboard-host", "a b"},
		{"--listen", "127.0.0.1:0", "--dashboard=false", "--dashboard-host", "dash.example"},
		{"--dashboard-host", "dash.example"},
	} {
		out, code := env.Run(t, append([]string{"run", "-f", specPath, "--host-id", "solo"}, args...)...)
		if code == 0 || !strings.Contains(out, "dashboard") {
			t.Errorf("coordd run %v: exit %d:\n%s", args, code, out)
		}
	}
}
