package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestPromiseLossHoldSemRun125: operations.md, "When Redis loses its
// data": "Meanwhile ... `sem run` fails with 125 (unknown semaphore), and
// the daemon logs `backend lost its data` with the hold"; the semaphore
// comes back once the hold (the longest lease) has passed. On a private
// redis-server and memcached, each restarted empty.
func TestPromiseLossHoldSemRun125(t *testing.T) {
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
			daemon := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "h1", "--resync", "1s", "--shutdown-grace", "5s")
			proctest.Eventually(t, 20*time.Second, "the daemon leading", func() bool { return strings.Contains(daemon.Output(), "gained leadership") })
			if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true"); code != 0 {
				t.Fatalf("sem run before the loss: %d\n%s", code, out)
			}

			restart()
			lost := time.Now()
			proctest.Eventually(t, 20*time.Second, "the daemon to log the loss", func() bool {
				return strings.Contains(daemon.Output(), "backend lost its data")
			})
			logged := daemon.Output()[strings.Index(daemon.Output(), "backend lost its data"):]
			if line, _, _ := strings.Cut(logged, "\n"); !strings.Contains(line, "hold") && !strings.Contains(line, "until") {
				t.Errorf("the loss is logged without its hold: %s", line)
			}
			// During the hold (well before the lease has passed since the
			// loss), sem run fails with 125 and says why.
			tries := 0
			for time.Since(lost) < lease-2*time.Second {
				out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "true")
				if time.Since(lost) >= lease-time.Second {
					break // the hold may have ended while it ran
				}
				if code != 125 || !strings.Contains(out, "not applied") {
					t.Fatalf("sem run during the hold (%v after the loss): exit %d, want 125 saying the semaphore is not applied:\n%s", time.Since(lost), code, out)
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
