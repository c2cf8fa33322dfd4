package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestSemOneRunsOneWaitsRestDropped: a coalescing job, `limit: 1,
// max_waiting: 1`, on every backend that holds semaphores with waiters. While the first
// arrival runs, a second waits and a third is dropped at once (exit 75);
// when the first ends the second runs. Two runs, one wait, one drop.
func TestSemOneRunsOneWaitsRestDropped(t *testing.T) {
	backendsYAML := map[string]func(t *testing.T) string{
		"sqlite": func(*testing.T) string { return "" },
		"mysql": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: mysql, dsn: %q, table_prefix: \"s3_\"}\n", testenv.MySQLDSN(t))
		},
		"postgres": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"s3_\"}\n", testenv.PostgresDSN(t))
		},
		"redis": func(t *testing.T) string {
			url, prefix := testenv.RedisURL(t)
			return fmt.Sprintf("backends:\n  b: {type: redis, url: %q, key_prefix: %q}\n", url, prefix)
		},
	}
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) {
			head := backendsYAML[typ](t)
			decl := "{limit: 1, max_waiting: 1, lease: 10s}"
			if head != "" {
				decl = "{backend: b, limit: 1, max_waiting: 1, lease: 10s}"
			}
			specPath := writeSpec(t, head+"semaphores:\n  s: "+decl+"\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %d\n%s", code, out)
			}
			dir := t.TempDir()
			runs, release := filepath.Join(dir, "runs.log"), filepath.Join(dir, "release")
			body := func(name string) string {
				return fmt.Sprintf(`echo %s >> %s; while [ ! -e %s ]; do sleep 0.05; done`, name, runs, release)
			}
			first := env.Start(t, "first", "sem", "run", "s", "-f", specPath, "--no-wait", "--", "sh", "-c", body("first"))
			proctest.Eventually(t, 20*time.Second, "the first run", func() bool { return countLines(runs) == 1 })
			second := env.Start(t, "second", "sem", "run", "s", "-f", specPath, "--wait", "1m", "--", "sh", "-c", body("second"))
			proctest.Eventually(t, 20*time.Second, "the second arrival waiting", func() bool {
				out, code := env.Run(t, "sem", "status", "s", "-f", specPath, "--json")
				var st []semStatusJSON
				return code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st) == 1 && st[0].Waiters == 1
			})
			start := time.Now()
			out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--wait", "1m", "--", "sh", "-c", body("third"))
			if code != 75 {
				t.Fatalf("third arrival: exit %d, want 75 (max_waiting reached)\n%s", code, out)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("third arrival dropped after %s; want at once", d)
			}
			writeFileT(t, release, "go\n")
			for _, p := range []*proctest.Proc{first, second} {
				if code := p.Wait(t, 30*time.Second); code != 0 {
					t.Errorf("%s: exit %d\n%s", p.Name, code, p.Output())
				}
			}
			b, err := os.ReadFile(runs)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(strings.Fields(string(b)), " "); got != "first second" {
				t.Errorf("runs %q, want \"first second\"", got)
			}
		})
	}
}
