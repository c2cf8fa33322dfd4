package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestSemRunFIFO: `coordd sem run` processes that arrive one after the other
// at a full semaphore start in the order they arrived, on every backend
// that keeps a line of waiters. The first waiter is stopped (SIGSTOP: a
// stalled host) while the holder leaves: its turn is kept for it, so
// neither the waiters behind it nor a --no-wait newcomer (exit 75) take the
// free slot, and it starts once it runs again.
func TestSemRunFIFO(t *testing.T) {
	backendsYAML := map[string]func(t *testing.T) string{
		"sqlite": func(*testing.T) string { return "" },
		"mysql": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: mysql, dsn: %q, table_prefix: \"ff_\"}\n", testenv.MySQLDSN(t))
		},
		"postgres": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"ff_\"}\n", testenv.PostgresDSN(t))
		},
		"postgres-session": func(t *testing.T) string {
			return fmt.Sprintf("backends:\n  b: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"fs_\"}\n", testenv.PostgresDSN(t))
		},
		"redis": func(t *testing.T) string {
			url, prefix := testenv.RedisURL(t)
			return fmt.Sprintf("backends:\n  b: {type: redis, url: %q, key_prefix: %q}\n", url, prefix)
		},
	}
	for _, typ := range []string{"sqlite", "mysql", "postgres", "postgres-session", "redis"} {
		t.Run(typ, func(t *testing.T) {
			head := backendsYAML[typ](t)
			decl := "{limit: 1, lease: 10s}"
			if head != "" {
				decl = "{backend: b, limit: 1, lease: 10s}"
			}
			if strings.HasSuffix(typ, "-session") {
				decl = "{backend: b, limit: 1, lease: 10s, mode: session}"
			}
			specPath := writeSpec(t, head+"semaphores:\n  s: "+decl+"\n")
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %d\n%s", code, out)
			}
			dir := t.TempDir()
			runs := filepath.Join(dir, "runs.log")
			release := func(name string) string { return filepath.Join(dir, "release-"+name) }
			body := func(name string) string {
				return fmt.Sprintf(`echo %s >> %s; while [ ! -e %s ]; do sleep 0.05; done`, name, runs, release(name))
			}
			waiters := func() int {
				out, code := env.Run(t, "sem", "status", "s", "-f", specPath, "--json")
				var st []semStatusJSON
				if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 {
					return -1
				}
				return st[0].Waiters
			}

			procs := []*proctest.Proc{env.Start(t, "holder", "sem", "run", "s", "-f", specPath, "--no-wait", "--", "sh", "-c", body("holder"))}
			proctest.Eventually(t, 20*time.Second, "the holder's start", func() bool { return countLines(runs) == 1 })
			names := []string{"holder"}
			for i := 1; i <= 4; i++ {
				name := fmt.Sprintf("w%d", i)
				procs = append(procs, env.Start(t, name, "sem", "run", "s", "-f", specPath, "--wait", "2m", "--", "sh", "-c", body(name)))
				proctest.Eventually(t, 20*time.Second, name+" in line", func() bool { return waiters() == i })
				names = append(names, name)
			}
			for i, name := range names {
				if i == 0 {
					procs[1].Signal(syscall.SIGSTOP)
				}
				writeFileT(t, release(name), "go\n")
				if i == 0 {
					if code := procs[0].Wait(t, 30*time.Second); code != 0 {
						t.Fatalf("holder: exit %d\n%s", code, procs[0].Output())
					}
					out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--no-wait", "--", "sh", "-c", "echo newcomer >> "+runs)
					if code != 75 {
						t.Errorf("a --no-wait newcomer while the first waiter is stopped: exit %d, want 75 (the slot is the first waiter's)\n%s", code, out)
					}
					// Time for a waiter behind the stopped one to overtake it,
					// were that possible; the assertion is the order below.
					time.Sleep(time.Second)
					procs[1].Signal(syscall.SIGCONT)
				}
				if i+1 < len(names) {
					proctest.Eventually(t, 30*time.Second, "the next start", func() bool { return countLines(runs) >= i+2 })
				}
			}
			for _, p := range procs {
				if code := p.Wait(t, 30*time.Second); code != 0 {
					t.Errorf("%s: exit %d\n%s", p.Name, code, p.Output())
				}
			}
			b, err := os.ReadFile(runs)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(strings.Fields(string(b)), " "), strings.Join(names, " "); got != want {
				t.Errorf("starts %q, want %q (arrival order)", got, want)
			}
		})
	}
}
