package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestPromiseLossHoldSemRunBusy: operations.md, "When Redis loses its
// data": "Meanwhile ... `sem run --no-wait` exits 75 (busy) saying when the
// semaphores return, and the daemon logs `backend lost its data` with the
// hold" within seconds; the semaphore comes back once the hold (the
// longest lease) has passed. On a private redis-server and memcached, each
// restarted empty, with the daemon's default resync period.
func TestPromiseLossHoldSemRunBusy(t *testing.T) {
	for _, typ := range []string{"redis", "memcached"} {
		t.Run(typ, func(t *testing.T) {
			const lease = 8 * time.Second
			var decl string
			var restart func()
			switch typ {
			case "redis":
				r := testenv.StartRedis(t)
				decl = fmt.Sprintf("{type: redis, url: %q, key_prefix: \"loss:\"}", r.URL())
				restart = func() { r.Kill(); r.Start(t) }
			case "memcached":
				m := testenv.StartMemcached(t)
				decl = fmt.Sprintf("{type: memcached, servers: [%q], key_prefix: \"loss:\"}", m.Addr())
				restart = func() { m.Kill(); m.Start(t) }
			}
			specPath := filepath.Join(t.TempDir(), "coordd.yaml")
			writeFileT(t, specPath, fmt.Sprintf(`backends:
  cache: %s
  local: {type: sqlite}
cluster: {backend: local}
semaphores:
  s: {backend: cache, limit: 1, lease: %s}
`, decl, lease))
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %d\n%s", code, out)
			}
			addr := freeAddr(t)
			daemon := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "h1", "--listen", addr, "--shutdown-grace", "5s")
			proctest.Eventually(t, 20*time.Second, "the daemon leading", func() bool { return strings.Contains(daemon.Output(), "gained leadership") })
			if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true"); code != 0 {
				t.Fatalf("sem run before the loss: %d\n%s", code, out)
			}

			restart()
			lost := time.Now()
			proctest.Eventually(t, 10*time.Second, "the daemon to log the loss", func() bool {
				return strings.Contains(daemon.Output(), "backend lost its data")
			})
			logged := daemon.Output()[strings.Index(daemon.Output(), "backend lost its data"):]
			if line, _, _ := strings.Cut(logged, "\n"); !strings.Contains(line, "hold") && !strings.Contains(line, "until") {
				t.Errorf("the loss is logged without its hold: %s", line)
			}
			// status and /metrics show the hold with its end.
			out, code := env.Run(t, "status", "-f", specPath, "--json")
			var st statusReport
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
				t.Fatalf("status --json: %d\n%s", code, out)
			}
			if len(st.LossHolds) != 1 || st.LossHolds[0].Backend != "cache" || st.LossHolds[0].Cause != "lost" || st.LossHolds[0].HoldUntil.IsZero() {
				t.Errorf("status --json during the hold: loss_holds %+v, want backend cache, cause lost, with its end", st.LossHolds)
			}
			if text, _ := env.Run(t, "status", "-f", specPath); !strings.Contains(text, "Hold:") || !strings.Contains(text, "semaphores return at") || !strings.Contains(text, "held after a data loss until") {
				t.Errorf("status during the hold does not show it:\n%s", text)
			}
			until := fmt.Sprintf("coordd_backend_loss_hold_until_timestamp_seconds{backend=\"cache\",cause=\"lost\"} %s", strconv.FormatFloat(float64(st.LossHolds[0].HoldUntil.UnixNano())/1e9, 'g', -1, 64))
			if m := scrape(addr); !strings.Contains(m, until) {
				t.Errorf("/metrics during the hold lacks %q:\n%s", until, grepLines(m, "loss_hold"))
			}
			if page := getPage(addr, "/"); !strings.Contains(page, `id="loss-hold-cache"`) || !strings.Contains(page, "semaphores return at") {
				t.Errorf("the dashboard's cluster page during the hold does not show it:\n%s", grepLines(page, "hold"))
			}
			// During the hold (well before the lease has passed since the
			// loss), sem run --no-wait exits 75 and says why.
			tries := 0
			for time.Since(lost) < lease-2*time.Second {
				out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true")
				if time.Since(lost) >= lease-time.Second {
					break // the hold may have ended while it ran
				}
				if code != 75 || !strings.Contains(out, "lost its data") || !strings.Contains(out, "semaphores return at") {
					t.Fatalf("sem run during the hold (%v after the loss): exit %d, want 75 saying when the semaphores return:\n%s", time.Since(lost), code, out)
				}
				tries++
				time.Sleep(200 * time.Millisecond)
			}
			if tries == 0 {
				t.Fatal("no sem run ran during the hold")
			}
			// The hold ends: the semaphore is back.
			proctest.Eventually(t, lease+30*time.Second, "the semaphore back after the hold", func() bool {
				_, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true")
				return code == 0
			})
			if took := time.Since(lost); took < lease {
				t.Errorf("the semaphore came back %v after the loss, before the hold of %v", took, lease)
			}
		})
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// getPage returns the body of the daemon's page at path ("" on error).
func getPage(addr, path string) string {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
