package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// TestMemcachedSemRunWitness: `sem run` on a memcached semaphore (limit 2,
// lease 3s; the cluster state in the embedded store): eight clients, one
// killed with kill -9 while it holds. A witness outside coordd never sees
// more than two commands at once, every other client runs, the killed
// slot comes back after its lease, and `sem status` and `plan` read the
// semaphore.
func TestMemcachedSemRunWitness(t *testing.T) {
	const limit, clients = 2, 8
	addr, prefix := testenv.MemcachedAddr(t)
	specPath := writeSpec(t, fmt.Sprintf(`backends:
  local: {type: sqlite}
  mc: {type: memcached, servers: [%q], key_prefix: %q}
cluster: {backend: local}
semaphores:
  s: {backend: mc, limit: %d, lease: 3s}
`, addr, prefix, limit))
	env := proctest.NewEnv(t)
	if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	if out, code := env.Run(t, "plan", "-f", specPath); code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("plan after apply: %d\n%s", code, out)
	}
	w := proctest.NewWitness(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "killed.pid")
	killed := env.Start(t, "killed", "sem", "run", "s", "-f", specPath, "--no-wait", "--",
		"sh", "-c", w.Script("echo $$ > "+pidFile+"; exec sleep 60"))
	child, err := strconv.Atoi(waitFile(t, pidFile, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out, code := env.Run(t, "sem", "status", "s", "-f", specPath, "--json")
	var st []semStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 || st[0].Limit != limit || len(st[0].Holders) != 1 {
		t.Fatalf("sem status while one holds: %d\n%s", code, out)
	}
	killed.Kill9()
	proctest.Eventually(t, 10*time.Second, "the killed client's command to die", func() bool { return !alive(child) })
	w.Leave(t)

	var ps []*proctest.Proc
	for i := range clients - 1 {
		ps = append(ps, env.Start(t, fmt.Sprintf("c%d", i), "sem", "run", "s", "-f", specPath, "--wait", "1m", "--",
			"sh", "-c", w.Script("sleep 0.3")))
	}
	for _, p := range ps {
		if code := p.Wait(t, 90*time.Second); code != 0 {
			t.Errorf("%s exited %d\n%s", p.Name, code, p.Output())
		}
	}
	runs, peak := w.Peak(t)
	if runs != clients || peak > limit {
		t.Errorf("witness: %d runs (want %d), peak %d (limit %d)", runs, clients, peak, limit)
	}
	// The killed holder's slot came back: two --no-wait holders at once.
	proctest.Eventually(t, 10*time.Second, "both slots free", func() bool {
		out, code := env.Run(t, "sem", "status", "s", "-f", specPath, "--json")
		var st []semStatusJSON
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st) == 1 && len(st[0].Holders) == 0
	})
	t.Logf("witness: %d runs, peak %d", runs, peak)

	// Keys that vanish (evicted, deleted) show in the plan as drift, and
	// apply repairs them.
	mc := memcache.New(addr)
	defer mc.Close()
	for _, k := range []struct{ key, want string }{
		{prefix + "{sem:s}fencing", "slot(s) missing"},
		{prefix + "{sem:s}cfg", "missing in backend mc"},
	} {
		if err := mc.Delete(k.key); err != nil {
			t.Fatalf("delete %s: %v", k.key, err)
		}
		out, code := env.Run(t, "plan", "-f", specPath)
		if code != 0 || !strings.Contains(out, "Drift") || !strings.Contains(out, k.want) {
			t.Fatalf("plan after deleting %s: %d\n%s", k.key, code, out)
		}
		if out, code := env.Run(t, "apply", "-f", specPath, "--auto-approve"); code != 0 {
			t.Fatalf("apply: %d\n%s", code, out)
		}
		if out, code := env.Run(t, "plan", "-f", specPath); code != 0 || !strings.Contains(out, "No changes") {
			t.Fatalf("plan after the repair: %d\n%s", code, out)
		}
	}
}
