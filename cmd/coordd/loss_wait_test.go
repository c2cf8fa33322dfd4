package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestBackendLossWaitersWaitOut: a private redis-server (no persistence) or
// memcached is restarted empty under contending `sem run` clients, some
// waiting (--wait), some not (--no-wait), while a daemon runs with the
// default resync period (a minute). The loss is noticed within seconds
// (by the clients and by the leader's marker check, not at the next
// resync); no client fails with 125: a waiting one waits out the hold and
// takes its slot, a --no-wait one exits 75 (or 125 saying it could not
// connect, while the server is down). No more than the limit hold at
// any moment (the witness, old holders included until they stop), and the
// first holder after the restart starts within the lease plus 5 s.
func TestBackendLossWaitersWaitOut(t *testing.T) {
	for _, typ := range []string{"redis", "memcached"} {
		t.Run(typ, func(t *testing.T) { backendLossWaitersWaitOut(t, typ) })
	}
}

func backendLossWaitersWaitOut(t *testing.T, typ string) {
	const (
		limit   = 2
		lease   = 3 * time.Second
		waiting = 4 // clients with --wait
		noWait  = 2 // clients with --no-wait
	)
	var decl string
	var restart func()
	switch typ {
	case "redis":
		r := testenv.StartRedis(t)
		decl = fmt.Sprintf("{type: redis, url: %q, key_prefix: \"lw:\"}", r.URL())
		restart = func() { r.Kill(); r.Start(t) }
	case "memcached":
		m := testenv.StartMemcached(t)
		decl = fmt.Sprintf("{type: memcached, servers: [%q], key_prefix: \"lw:\"}", m.Addr())
		restart = func() { m.Kill(); m.Start(t) }
	}
	dir := t.TempDir()
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFileT(t, specPath, fmt.Sprintf(`backends:
  cache: %s
  local: {type: sqlite}
cluster: {backend: local}
semaphores:
  s: {backend: cache, limit: %d, lease: %s}
`, decl, limit, lease))
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	daemon := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "h1", "--shutdown-grace", "5s")
	proctest.Eventually(t, 20*time.Second, "the daemon leading", func() bool { return strings.Contains(daemon.Output(), "gained leadership") })

	w := proctest.NewWitness(t)
	starts := filepath.Join(dir, "starts")
	// An old holder stopped with TERM (its slot lost) still leaves the
	// witness: the trap lets the shell run on after its sleep dies.
	body := "trap true TERM\n" + w.Script("date +%s.%N >> "+starts+"; sleep 1.5")
	type result struct {
		client int
		code   int
		at     time.Time
		out    string
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for i := range waiting + noWait {
		args := []string{"sem", "run", "s", "-f", specPath, "--host-id", fmt.Sprintf("c%d", i)}
		if i < waiting {
			args = append(args, "--wait", "30s")
		} else {
			args = append(args, "--no-wait")
		}
		args = append(args, "--", "sh", "-c", body)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := env.Command(args...).CombinedOutput()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					code = -1
				}
				mu.Lock()
				results = append(results, result{client: i, code: code, at: time.Now(), out: string(out)})
				mu.Unlock()
				if code != 0 {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	// Holders run before the restart.
	proctest.Eventually(t, 30*time.Second, "holders before the restart", func() bool {
		runs, _ := w.Peak(t)
		return runs >= 3
	})
	restart()
	restarted := time.Now()
	// Let the hold pass and holders come back, then let the clients stop.
	proctest.Eventually(t, lease+40*time.Second, "a holder after the restart", func() bool {
		for _, s := range readStarts(t, starts) {
			if s.After(restarted) {
				return true
			}
		}
		return false
	})
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	var first time.Time
	for _, s := range readStarts(t, starts) {
		if s.After(restarted) && (first.IsZero() || s.Before(first)) {
			first = s
		}
	}
	if took := first.Sub(restarted); took > lease+5*time.Second {
		t.Errorf("the first holder after the restart started %v after it, want within the lease (%v) plus 5s", took, lease)
	}
	runs, peak := w.Peak(t)
	if peak > limit {
		t.Errorf("witness: peak %d holders at once, limit %d", peak, limit)
	}
	codes := map[int]int{}
	for _, r := range results {
		codes[r.code]++
		ok := []int{0, 122} // done, or an old holder that lost its slot
		if r.client >= waiting {
			ok = append(ok, 75) // --no-wait: busy, or the hold
		}
		// A --no-wait client that met the server down exits 75 too (a
		// temporary failure), never 125 (a configuration error).
		if !slices.Contains(ok, r.code) {
			t.Errorf("client c%d exited %d at %v after the restart:\n%s", r.client, r.code, r.at.Sub(restarted).Round(time.Millisecond), r.out)
		}
	}
	if !strings.Contains(daemon.Output(), "lost its data") {
		t.Errorf("the daemon did not report the loss:\n%s", daemon.Output())
	}
	t.Logf("%s: %d runs, peak %d; first holder %v after the restart; exit codes %v",
		typ, runs, peak, first.Sub(restarted).Round(time.Millisecond), codes)
}

// readStarts reads the start times the witness body appended.
func readStarts(t *testing.T, path string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []time.Time
	for _, f := range strings.Fields(string(b)) {
		sec, err := strconv.ParseFloat(f, 64)
		if err != nil {
			continue // a line cut short by a kill
		}
		out = append(out, time.Unix(0, int64(sec*1e9)))
	}
	return out
}

// TestCronSemaphoreWaitsOutLossHold: a cron task (on the embedded store)
// takes a semaphore on a private redis-server or memcached that restarts
// empty. The occurrences that fall due during the hold wait for the
// semaphore (as for a busy slot) and run once it is back; none fails for a
// semaphore "not applied", and the task runs again within the lease plus
// 5 s of the restart.
func TestCronSemaphoreWaitsOutLossHold(t *testing.T) {
	for _, typ := range []string{"redis", "memcached"} {
		t.Run(typ, func(t *testing.T) { cronSemaphoreWaitsOutLossHold(t, typ) })
	}
}

// restartable is a private server a test restarts empty.
type restartable interface {
	Kill()
	Start(t testing.TB)
}

// privateCache starts a private redis-server or memcached and returns it
// with the spec line of a backend named cache on it.
func privateCache(t *testing.T, typ string) (restartable, string) {
	t.Helper()
	if typ == "memcached" {
		m := testenv.StartMemcached(t)
		return m, fmt.Sprintf(`cache: {type: memcached, servers: [%q], key_prefix: "lc:"}`, m.Addr())
	}
	r := testenv.StartRedis(t)
	return r, fmt.Sprintf(`cache: {type: redis, url: %q, key_prefix: "lc:"}`, r.URL())
}

func cronSemaphoreWaitsOutLossHold(t *testing.T, typ string) {
	const lease = 3 * time.Second
	r, cache := privateCache(t, typ)
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	specPath := filepath.Join(dir, "coordd.yaml")
	writeFileT(t, specPath, fmt.Sprintf(`backends:
  %s
  local: {type: sqlite}
cluster: {backend: local}
semaphores:
  s: {backend: cache, limit: 1, lease: %s}
cron:
  tick: {backend: local, schedule: "@every 1s", semaphore: s, command: 'date +%%s.%%N >> %s'}
`, cache, lease, ran))
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	daemon := env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "h1", "--shutdown-grace", "5s")
	proctest.Eventually(t, 30*time.Second, "the task running before the restart", func() bool { return len(readStarts(t, ran)) >= 2 })

	r.Kill()
	r.Start(t)
	restarted := time.Now()
	var first time.Time
	proctest.Eventually(t, lease+30*time.Second, "a run after the restart", func() bool {
		for _, s := range readStarts(t, ran) {
			if s.After(restarted) {
				first = s
				return true
			}
		}
		return false
	})
	if took := first.Sub(restarted); took > lease+5*time.Second {
		t.Errorf("the first run after the restart started %v after it, want within the lease (%v) plus 5s", took, lease)
	}
	out, code := env.Run(t, "cron", "history", "tick", "-f", specPath, "--json", "--limit", "0")
	if code != 0 {
		t.Fatalf("cron history: %d\n%s", code, out)
	}
	var runs []cronRunJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("cron history --json: %v\n%s", err, out)
	}
	for _, run := range runs {
		if run.Status == "failed" {
			t.Errorf("run of %s failed: exit %d: %s", run.ScheduledAt.Format(time.StampMilli), run.RunResult.ExitCode, run.Error)
		}
	}
	if !strings.Contains(daemon.Output(), "lost its data") {
		t.Errorf("the daemon did not report the loss:\n%s", daemon.Output())
	}
}

// TestSemRunWaitSaysWhenSemaphoresReturn: on a terminal, a sem run that
// waits through a data-loss hold says why and until when ("backend cache
// lost its data (restarted empty or flushed); semaphores return at
// 15:04:05"), then gets its slot, once the daemon has put the semaphore
// back, and runs its command.
func TestSemRunWaitSaysWhenSemaphoresReturn(t *testing.T) {
	for _, typ := range []string{"redis", "memcached"} {
		t.Run(typ, func(t *testing.T) {
			r, cache := privateCache(t, typ)
			dir := t.TempDir()
			specPath := filepath.Join(dir, "coordd.yaml")
			writeFileT(t, specPath, fmt.Sprintf("backends:\n  %s\n  local: {type: sqlite}\ncluster: {backend: local}\nsemaphores:\n  s: {backend: cache, limit: 1, lease: 3s}\n", cache))
			env := proctest.NewEnv(t)
			if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
				t.Fatalf("apply: %d\n%s", code, out)
			}
			env.Start(t, "daemon", "run", "-f", specPath, "--host-id", "h1", "--shutdown-grace", "5s")
			if out, code := env.Run(t, "sem", "run", "s", "-f", specPath, "--", "true"); code != 0 {
				t.Fatalf("sem run before the restart: %d\n%s", code, out)
			}
			r.Kill()
			r.Start(t)
			pty, tty := openPTY(t)
			buf := readPTY(pty)
			cmd := env.Command("sem", "run", "s", "-f", specPath, "--wait", "30s", "--", "true")
			cmd.Stdout, cmd.Stderr = io.Discard, tty
			if err := cmd.Run(); err != nil {
				t.Fatalf("sem run through the hold: %v\n%s", err, buf.String())
			}
			want := "backend cache lost its data (restarted empty or flushed); semaphores return at "
			proctest.Eventually(t, 5*time.Second, "the reason on the terminal", func() bool { return strings.Contains(buf.String(), want) })
		})
	}
}
