package main

// Several hosts on one MariaDB or one Redis: three `coordd run` daemons
// with different --host-ids on a fresh database of the shared MariaDB or a
// fresh key prefix of the shared Redis, and clients and workers that name
// those hosts. Exactly-once cron and leader failover are in daemon's
// TestThreeDaemonsEveryOccurrenceOnce (its mysql and redis subtests); these
// cover the semaphore limit and the queue under kill -9.

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// mysqlHostPool bounds the pool of every coordd process of these tests: the
// shared server has max_connections 151 and other test packages use it at
// the same time.
const mysqlHostPool = "maxOpenConns=4"

// hosts is three daemons, h1 to h3, sharing one spec.
type hosts struct {
	env     *proctest.Env
	spec    string
	hosts   []string
	daemons []*proctest.Proc
}

// hostBackends are the cluster backends the several-hosts tests run on.
var hostBackends = []string{"mysql", "postgres", "redis"}

// hostsBackend returns the backends section and cluster line of a spec on
// a fresh database of the shared MariaDB or PostgreSQL or a fresh key
// prefix of the shared Redis.
func hostsBackend(t *testing.T, typ string) string {
	t.Helper()
	switch typ {
	case "mysql":
		dsn := testenv.MySQLDSN(t)
		if strings.Contains(dsn, "?") {
			dsn += "&" + mysqlHostPool
		} else {
			dsn += "?" + mysqlHostPool
		}
		return fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q, table_prefix: \"mh_\"}\ncluster: {backend: db, leader_lease: 2s}\n", dsn)
	case "postgres":
		return fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"mh_\"}\ncluster: {backend: db, leader_lease: 2s}\n", testenv.PostgresDSN(t))
	case "redis":
		url, prefix := testenv.RedisURL(t)
		return fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\ncluster: {backend: db, leader_lease: 2s}\n", url, prefix)
	}
	t.Fatalf("hosts: unknown backend %q", typ)
	return ""
}

// startHosts writes a spec with objects (YAML for semaphores, cron or
// queues) on a fresh store of backend type typ, applies it, and starts
// `coordd run --host-id hN` for h1, h2 and h3 (a plain build of coordd, as
// a server would run it). It returns once one of them leads.
func startHosts(t *testing.T, c *cli, typ, objects string) *hosts {
	t.Helper()
	spec := writeSpec(t, hostsBackend(t, typ)+objects)
	if code, _, errs := c.run("", false, "apply", "-f", spec, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	h := &hosts{env: &proctest.Env{Bin: proctest.Binary(t), DataDir: c.dataDir}, spec: spec, hosts: []string{"h1", "h2", "h3"}}
	for _, host := range h.hosts {
		h.daemons = append(h.daemons, h.env.StartWith(t, host, []string{"COORDD_TEST_HOST=" + host},
			"run", "-f", spec, "--host-id", host, "--shutdown-grace", "5s"))
	}
	proctest.Eventually(t, 20*time.Second, "a leader among h1-h3", func() bool {
		return strings.HasPrefix(h.leader(t), "h")
	})
	return h
}

// leader is the host id of the current leader, or "".
func (h *hosts) leader(t *testing.T) string {
	t.Helper()
	out, code := h.env.Run(t, "status", "-f", h.spec, "--json")
	if code != 0 {
		t.Fatalf("status: %d\n%s", code, out)
	}
	var st struct {
		Leader *struct {
			Holder string `json:"holder"`
		} `json:"leader"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Leader == nil {
		return ""
	}
	host, _, _ := strings.Cut(st.Leader.Holder, "/")
	return host
}

// stop checks that every daemon is still running, then stops each with
// SIGTERM and checks that it exits 0.
func (h *hosts) stop(t *testing.T) {
	t.Helper()
	for _, d := range h.daemons {
		if !d.Running() {
			t.Errorf("daemon %s died during the test:\n%s", d.Name, d.Output())
		}
		d.Signal(syscall.SIGTERM)
	}
	for _, d := range h.daemons {
		if code := d.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("daemon %s exited %d", d.Name, code)
		}
	}
}

// TestHostsSemWitnessKill9: on each cluster backend, with three daemons up, twelve `sem run`
// clients spread over h1-h3 share limit 3 (lease 4s); three of them, one per
// host, are killed with kill -9 while they hold a slot. A witness outside
// coordd never sees more than 3 commands at once, the killed clients'
// commands die with them, every other client gets a slot (so the killed
// slots came back after their lease), and at the end all three slots are
// free together.
func TestHostsSemWitnessKill9(t *testing.T) {
	for _, typ := range hostBackends {
		t.Run(typ, func(t *testing.T) { hostsSemWitnessKill9(t, typ) })
	}
}

func hostsSemWitnessKill9(t *testing.T, typ string) {
	const limit, clients = 3, 12
	c := newCLI(t)
	// A 4 s lease: a client starved by a loaded machine still renews in
	// time (with 2 s one lost its slot, exit 122, under a full CI run).
	h := startHosts(t, c, typ, fmt.Sprintf("semaphores:\n  s: {limit: %d, lease: 4s}\n", limit))
	w := proctest.NewWitness(t)
	dir := t.TempDir()

	type client struct {
		p       *proctest.Proc
		pidFile string // set for the clients killed mid-hold
	}
	cs := make([]client, clients)
	for i := range cs {
		body := "sleep 0.3"
		if i%4 == 0 { // 0, 4, 8: one per host
			cs[i].pidFile = filepath.Join(dir, fmt.Sprintf("c%d.pid", i))
			body = "echo $$ > " + cs[i].pidFile + "; exec sleep 60"
		}
		cs[i].p = h.env.Start(t, fmt.Sprintf("c%d", i), "sem", "run", "s", "-f", h.spec,
			"--host-id", h.hosts[i%len(h.hosts)], "--wait", "2m", "--", "sh", "-c", w.Script(body))
	}
	for i, cl := range cs {
		if cl.pidFile == "" {
			continue
		}
		child, err := strconv.Atoi(waitFile(t, cl.pidFile, time.Minute))
		if err != nil {
			t.Fatalf("c%d pid file: %v", i, err)
		}
		cl.p.Kill9()
		proctest.Eventually(t, 10*time.Second, fmt.Sprintf("c%d's command to die with it", i), func() bool { return !alive(child) })
		w.Leave(t)
		t.Logf("killed c%d (%s) mid-hold", i, h.hosts[i%len(h.hosts)])
	}
	for i, cl := range cs {
		if cl.pidFile == "" {
			if code := cl.p.Wait(t, 2*time.Minute); code != 0 {
				t.Errorf("c%d exited %d", i, code)
			}
		}
	}

	// Every slot came back: once the killed holders' leases ran out, three
	// --no-wait clients hold at once.
	proctest.Eventually(t, 10*time.Second, "no holders left", func() bool {
		out, code := h.env.Run(t, "sem", "status", "s", "-f", h.spec, "--json")
		var st []semStatusJSON
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st) == 1 && len(st[0].Holders) == 0
	})
	last := proctest.NewWitness(t)
	var wg sync.WaitGroup
	codes := make([]int, limit)
	for i := range codes {
		wg.Add(1)
		cmd := h.env.Command("sem", "run", "s", "-f", h.spec, "--host-id", h.hosts[i], "--no-wait", "--", "sh", "-c", last.Script("sleep 1"))
		go func() {
			defer wg.Done()
			codes[i] = -1
			if err := cmd.Run(); err == nil {
				codes[i] = 0
			} else if ee, ok := err.(*exec.ExitError); ok {
				codes[i] = ee.ExitCode()
			}
		}()
	}
	wg.Wait()
	if _, peak := last.Peak(t); peak != limit || slices.ContainsFunc(codes, func(c int) bool { return c != 0 }) {
		t.Errorf("after the leases: --no-wait exits %v, peak %d; want all %d slots free", codes, peak, limit)
	}

	runs, peak := w.Peak(t)
	if runs != clients || peak > limit || peak < 1 {
		t.Errorf("witness: %d runs (want %d), peak %d holders (limit %d)", runs, clients, peak, limit)
	}
	t.Logf("witness: %d runs, peak %d concurrent holders; leader %s", runs, peak, h.leader(t))
	h.stop(t)
}

// TestHostsQueueWorkKill9 is TestQueueWorkKill9 on MySQL and Redis with three
// daemons up: 1,000 jobs, four workers spread over h1-h3, two of them
// killed with kill -9 (after 250 and 500 jobs ran). Every job is acked; a
// job runs twice only when a killed worker had it or a lease loss was
// reported. (About 30 jobs/s on a busy 2-core machine, where each job's
// two process starts dominate: hence 1,000, not more.)
func TestHostsQueueWorkKill9(t *testing.T) {
	for _, typ := range hostBackends {
		t.Run(typ, func(t *testing.T) { hostsQueueWorkKill9(t, typ) })
	}
}

func hostsQueueWorkKill9(t *testing.T, typ string) {
	c := newCLI(t)
	h := startHosts(t, c, typ, "queues:\n  q: {partitions: 4, visibility_timeout: 2s, max_attempts: 10, retry_backoff: 0s}\n")
	queueWorkKill9(t, c, h.spec, queueKill9{jobs: 1000, workers: 4, conc: 2, killAt: []int{250, 500}, hosts: h.hosts})
	h.stop(t)
}
