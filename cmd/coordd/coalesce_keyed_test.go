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

// TestSemKeyedOneRunsOneWaitsPerKey: a coalescing job per data key, with
// real `coordd sem run NAME --key K` processes on a semaphore declared once
// with `keyed: true, limit: 1, max_waiting: 1`, on every backend that holds
// keyed semaphores. For key user-7: while the first arrival runs, a second
// waits and a third is dropped at once (exit 75); meanwhile key user-8 runs
// at once, since its instance is its own. When the first ends the second
// runs, and once every run ended no instance is left.
func TestSemKeyedOneRunsOneWaitsPerKey(t *testing.T) {
	backendsYAML := map[string]func(t *testing.T) string{
		"sqlite": func(*testing.T) string { return "" },
		"mysql": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: mysql, dsn: %q, table_prefix: \"k3_\"}\n", testenv.MySQLDSN(t))
		},
		"postgres": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"k3_\"}\n", testenv.PostgresDSN(t))
		},
		"redis": func(t *testing.T) string {
			url, prefix := testenv.RedisURL(t)
			return fmt.Sprintf("backends:\n  b: {type: redis, url: %q, key_prefix: %q}\n", url, prefix)
		},
	}
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) {
			head := backendsYAML[typ](t)
			decl := "{keyed: true, limit: 1, max_waiting: 1, lease: 10s}"
			if head != "" {
				decl = "{backend: b, keyed: true, limit: 1, max_waiting: 1, lease: 10s}"
			}
			specPath := writeSpec(t, head+"semaphores:\n  s: "+decl+"\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %d\n%s", code, out)
			}
			dir := t.TempDir()
			runs, release := filepath.Join(dir, "runs.log"), filepath.Join(dir, "release")
			body := func(name string) string {
				return fmt.Sprintf(`echo %s $COORDD_SEMAPHORE_KEY >> %s; while [ ! -e %s ]; do sleep 0.05; done`, name, runs, release)
			}
			status := func(key string) (semStatusJSON, bool) {
				args := []string{"sem", "status", "s", "-f", specPath, "--json"}
				if key != "" {
					args = append(args, "--key", key)
				}
				out, code := env.Run(t, args...)
				var st []semStatusJSON
				if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 {
					return semStatusJSON{}, false
				}
				return st[0], true
			}

			first := env.Start(t, "first", "sem", "run", "s", "--key", "user-7", "-f", specPath, "--no-wait", "--", "sh", "-c", body("first"))
			proctest.Eventually(t, 20*time.Second, "the first run", func() bool { return countLines(runs) == 1 })
			second := env.Start(t, "second", "sem", "run", "s", "--key", "user-7", "-f", specPath, "--wait", "1m", "--", "sh", "-c", body("second"))
			proctest.Eventually(t, 20*time.Second, "the second arrival waiting", func() bool {
				st, ok := status("user-7")
				return ok && st.Waiters == 1 && len(st.Holders) == 1
			})
			start := time.Now()
			out, code := env.Run(t, "sem", "run", "s", "--key", "user-7", "-f", specPath, "--wait", "1m", "--", "sh", "-c", body("third"))
			if code != 75 {
				t.Fatalf("third arrival of user-7: exit %d, want 75 (max_waiting reached)\n%s", code, out)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("third arrival dropped after %s; want at once", d)
			}
			// Another key is its own instance: it runs at once.
			out, code = env.Run(t, "sem", "run", "s", "--key", "user-8", "-f", specPath, "--no-wait", "--", "sh", "-c", "echo other $COORDD_SEMAPHORE_KEY >> "+runs)
			if code != 0 {
				t.Fatalf("first arrival of user-8 while user-7 is busy: exit %d, want 0\n%s", code, out)
			}
			if st, ok := status(""); !ok || len(st.Instances) != 1 || st.Instances[0].Key != "user-7" {
				t.Errorf("instances while user-7 runs and waits: %+v, want user-7 alone (user-8 ended)", st.Instances)
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
			if got := strings.Join(strings.Fields(string(b)), " "); got != "first user-7 other user-8 second user-7" {
				t.Errorf("runs %q, want \"first user-7 other user-8 second user-7\"", got)
			}
			if st, ok := status(""); !ok || len(st.Instances) != 0 || len(st.Holders) != 0 || st.Waiters != 0 {
				t.Errorf("after every run ended: %+v, want no instance left", st)
			}

			// A key must match the declaration.
			if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--", "true"); code != 125 || !strings.Contains(out, "--key") {
				t.Errorf("sem run of a keyed semaphore without --key: exit %d, want 125 naming --key\n%s", code, out)
			}
			if out, code := env.Run(t, "sem", "run", "s", "--key", "a\tb", "-f", specPath, "--", "true"); code != 125 || !strings.Contains(out, "invalid") {
				t.Errorf("sem run with a key holding a tab: exit %d, want 125\n%s", code, out)
			}
		})
	}
}
