package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// hostsJSON is the hosts part of `coordd status --json`.
type hostsJSON struct {
	LocalHash string `json:"local_spec_hash"`
	Applied   *struct {
		SpecHash string `json:"spec_hash"`
	} `json:"applied"`
	Hosts []struct {
		Host        string  `json:"host"`
		State       string  `json:"state"`
		Leader      bool    `json:"leader"`
		SpecHash    string  `json:"spec_hash"`
		RunsApplied bool    `json:"runs_applied_spec"`
		LastSeen    string  `json:"last_seen"`
		Ago         float64 `json:"last_seen_seconds_ago"`
	} `json:"hosts"`
	Groups []struct {
		SpecHash string   `json:"spec_hash"`
		Applied  bool     `json:"applied"`
		Hosts    []string `json:"hosts"`
	} `json:"host_spec_hashes"`
	Warning string `json:"hosts_warning"`
}

func hostsStatus(t *testing.T, env *proctest.Env, specPath string) hostsJSON {
	t.Helper()
	s, out, ok := tryHostsStatus(t, env, specPath)
	if !ok {
		t.Fatalf("status:\n%s", out)
	}
	return s
}

// tryHostsStatus is hostsStatus that reports a failed status instead of
// failing: while the first daemon migrates a fresh MySQL database, status
// may find some tables missing.
func tryHostsStatus(t *testing.T, env *proctest.Env, specPath string) (hostsJSON, string, bool) {
	t.Helper()
	out, code := env.Run(t, "status", "-f", specPath, "--json")
	var s hostsJSON
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		return s, out, false
	}
	return s, out, true
}

// hostState is host's state in s, "" when it is not listed.
func hostState(s hostsJSON, host string) string {
	for _, h := range s.Hosts {
		if h.Host == host {
			return h.State
		}
	}
	return ""
}

// listenBase waits for the daemon's listen address in its log.
func listenBase(t *testing.T, d *proctest.Proc) string {
	t.Helper()
	var base string
	proctest.Eventually(t, 20*time.Second, d.Name+"'s listen address in the log", func() bool {
		m := listenAddr.FindStringSubmatch(d.Output())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	return base
}

// TestHostsDifferentSpecs runs two daemons on one store with different
// spec files, on each cluster backend: the first leads and applies its
// spec; `coordd status --json` lists both hosts, marks the leader, and
// warns that live hosts run two spec hashes, naming which host runs which;
// each daemon's /metrics says whether its own hash is the applied one. The
// second daemon's clean shutdown shows it stopped and ends the warning.
func TestHostsDifferentSpecs(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { hostsDifferentSpecs(t, "") })
	t.Run("mysql", func(t *testing.T) {
		hostsDifferentSpecs(t, fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q, table_prefix: \"hr_\"}\ncluster: {backend: db}\n", testenv.MySQLDSN(t)))
	})
	t.Run("postgres", func(t *testing.T) {
		hostsDifferentSpecs(t, fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q, schema: coordd, table_prefix: \"hr_\"}\ncluster: {backend: db}\n", testenv.PostgresDSN(t)))
	})
	t.Run("redis", func(t *testing.T) {
		url, prefix := testenv.RedisURL(t)
		hostsDifferentSpecs(t, fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\ncluster: {backend: db}\n", url, prefix))
	})
}

func hostsDifferentSpecs(t *testing.T, header string) {
	env := proctest.NewEnv(t)
	dir := t.TempDir()
	specA, specB := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, specA, header+"semaphores:\n  s: {limit: 1}\n")
	writeFile(t, specB, header+"semaphores:\n  s: {limit: 2}\n")

	// Before any daemon ran, status works and lists no host.
	if st := hostsStatus(t, env, specA); len(st.Hosts) != 0 || st.Warning != "" {
		t.Fatalf("status before any daemon: %+v", st)
	}
	if out, code := env.Run(t, "status", "-f", specA); code != 0 || !strings.Contains(out, "Hosts:     none recorded yet") {
		t.Fatalf("status text before any daemon: %d\n%s", code, out)
	}

	a := env.Start(t, "ha", "run", "-f", specA, "--host-id", "ha", "--listen", "127.0.0.1:0", "--log-level", "debug", "--shutdown-grace", "5s")
	proctest.Eventually(t, 20*time.Second, "ha applies spec a", func() bool {
		st, _, ok := tryHostsStatus(t, env, specA)
		return ok && st.Applied != nil && st.Applied.SpecHash == st.LocalHash && hostState(st, "ha") == "live"
	})
	b := env.Start(t, "hb", "run", "-f", specB, "--host-id", "hb", "--listen", "127.0.0.1:0", "--log-level", "debug", "--shutdown-grace", "5s")
	var st hostsJSON
	proctest.Eventually(t, 20*time.Second, "both hosts live in status", func() bool {
		st = hostsStatus(t, env, specA)
		return hostState(st, "ha") == "live" && hostState(st, "hb") == "live"
	})
	hashA, hashB := st.LocalHash, hostsStatus(t, env, specB).LocalHash
	for _, h := range st.Hosts {
		switch h.Host {
		case "ha":
			if !h.Leader || h.SpecHash != hashA || !h.RunsApplied {
				t.Errorf("ha: %+v; want the leader, running the applied hash %s", h, hashA)
			}
		case "hb":
			if h.Leader || h.SpecHash != hashB || h.RunsApplied {
				t.Errorf("hb: %+v; want a follower running %s, not the applied hash", h, hashB)
			}
		default:
			t.Errorf("unexpected host %+v", h)
		}
		if h.Ago < 0 || h.Ago > 20 {
			t.Errorf("%s last seen %v s ago", h.Host, h.Ago)
		}
	}
	if len(st.Groups) != 2 || st.Groups[0].SpecHash != hashA || !st.Groups[0].Applied || st.Groups[0].Hosts[0] != "ha" ||
		st.Groups[1].SpecHash != hashB || st.Groups[1].Hosts[0] != "hb" {
		t.Errorf("host_spec_hashes %+v; want %s (applied) on ha, then %s on hb", st.Groups, hashA, hashB)
	}
	for _, want := range []string{"2 different spec hashes", hashA[:12] + " (applied) on ha", hashB[:12] + " on hb"} {
		if !strings.Contains(st.Warning, want) {
			t.Errorf("hosts_warning %q lacks %q", st.Warning, want)
		}
	}
	out, _ := env.Run(t, "status", "-f", specB)
	for _, want := range []string{"Hosts:     2 live", "ha  leader  live", "hb          live", "not applied", "Warning:   live hosts run 2 different spec hashes"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}

	// Each daemon's /metrics: its own hash against the applied one, and the
	// cluster's hosts read at scrape time.
	for _, c := range []struct {
		d     *proctest.Proc
		match float64
		local string
	}{{a, 1, hashA}, {b, 0, hashB}} {
		base := listenBase(t, c.d)
		var body string
		proctest.Eventually(t, 20*time.Second, c.d.Name+"'s coordd_spec_hash_matches_applied", func() bool {
			_, body = scrape(t, base+"/metrics")
			v, ok := metricValue(body, "coordd_spec_hash_matches_applied")
			return ok && v == c.match
		})
		if v, ok := metricValue(body, "coordd_spec_info", `local_hash="`+c.local[:12]+`"`, `applied_hash="`+hashA[:12]+`"`); !ok || v != 1 {
			t.Errorf("%s: coordd_spec_info = %v, %v\n%s", c.d.Name, v, ok, body)
		}
		if v, ok := metricValue(body, "coordd_hosts", `state="live"`); !ok || v != 2 {
			t.Errorf("%s: coordd_hosts{state=live} = %v, %v", c.d.Name, v, ok)
		}
		if v, ok := metricValue(body, "coordd_hosts_spec_hashes"); !ok || v != 2 {
			t.Errorf("%s: coordd_hosts_spec_hashes = %v, %v", c.d.Name, v, ok)
		}
		if v, ok := metricValue(body, "coordd_backend_round_trip_seconds_count", `op="heartbeat"`); !ok || v < 1 {
			t.Errorf("%s: no timed heartbeat: %v, %v", c.d.Name, v, ok)
		}
	}

	// A clean shutdown leaves hb stopped, and a stopped host is not counted
	// among those that disagree.
	b.Signal(syscall.SIGTERM)
	if code := b.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("hb exited %d", code)
	}
	st = hostsStatus(t, env, specA)
	if hostState(st, "hb") != "stopped" || hostState(st, "ha") != "live" || st.Warning != "" || len(st.Groups) != 1 {
		t.Fatalf("after hb stopped: %+v", st)
	}
	a.Signal(syscall.SIGTERM)
	if code := a.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("ha exited %d", code)
	}
}

// TestHeartbeatAndMismatchLog runs a daemon in-process with a 100 ms
// heartbeat on a stale checkout (a spec applied before and superseded): its
// record's last seen keeps moving, the mismatch is logged once (after two
// checks agree) however many heartbeats pass, and a reload to the applied
// spec ends it with one more line.
func TestHeartbeatAndMismatchLog(t *testing.T) {
	env := proctest.NewEnv(t)
	t.Setenv("COORDD_DATA_DIR", env.DataDir)
	oldSpec, newSpec := supersededSpecs(t, env)
	logs := &proctest.SyncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, daemon.Config{SpecPath: oldSpec, HostID: "solo", Version: "0.1.0", Log: log,
		ShutdownGrace: time.Second, HeartbeatEvery: 100 * time.Millisecond, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	const differs = "this host's spec differs from the applied one: a stale checkout"
	proctest.Eventually(t, 20*time.Second, "the mismatch in the log", func() bool { return strings.Contains(logs.String(), differs) })
	first := hostsStatus(t, env, newSpec)
	proctest.Eventually(t, 20*time.Second, "a later heartbeat", func() bool {
		st := hostsStatus(t, env, newSpec)
		return len(st.Hosts) == 1 && len(first.Hosts) == 1 && st.Hosts[0].LastSeen > first.Hosts[0].LastSeen
	})
	// Several more checks (one every 4 heartbeats) find the same mismatch.
	time.Sleep(time.Second)
	if n := strings.Count(logs.String(), differs); n != 1 {
		t.Fatalf("the mismatch was logged %d times, want once:\n%s", n, logs.String())
	}
	st := hostsStatus(t, env, newSpec)
	if len(st.Hosts) != 1 || st.Hosts[0].Host != "solo" || st.Hosts[0].RunsApplied || st.Hosts[0].State != "live" || !st.Hosts[0].Leader {
		t.Fatalf("status hosts %+v; want solo, the live leader, not running the applied spec", st.Hosts)
	}

	// The checkout catches up: a reload heartbeats and checks at once.
	writeFile(t, oldSpec, "semaphores:\n  s: {limit: 5}\n")
	proctest.Eventually(t, 20*time.Second, "the match in the log", func() bool {
		return strings.Contains(logs.String(), "this host's spec matches the applied one again")
	})
	st = hostsStatus(t, env, newSpec)
	if len(st.Hosts) != 1 || !st.Hosts[0].RunsApplied {
		t.Fatalf("after the reload: %+v; want solo running the applied spec", st.Hosts)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	done <- nil // for the deferred wait
	if st := hostsStatus(t, env, newSpec); len(st.Hosts) != 1 || st.Hosts[0].State != "stopped" {
		t.Fatalf("after the daemon stopped: %+v", st.Hosts)
	}
}
