package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRateRunWitnessAcrossProcesses: `coordd rate run` processes started
// at once, each its own client of the store, start their commands no
// faster than the limit allows. Every command writes its start time; over
// any window of those times, the starts never exceed rate × window +
// burst (with 250 ms for the time between a grant and its command's
// start, a process spawn under load). The idle limit grants its burst at
// once, --no-wait exits 75 when no permit is due, and the command gets
// COORDD_RATE_LIMIT. On every backend that holds rate limits.
func TestRateRunWitnessAcrossProcesses(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { rateRunWitness(t, typ) })
	}
}

// rateIv is the interval of the witness tests' limit (2/1s), and
// rateSpawn the slack for the time between a grant and its command's
// start (a process spawn on a loaded machine, which can bunch starts up).
const rateIv, rateSpawn = 500 * time.Millisecond, 250 * time.Millisecond

func rateRunWitness(t *testing.T, typ string) {
	const decl = "rate_limits:\n  api: {rate: 2/1s, burst: 2}\n" // one per 500ms
	yaml := decl
	if typ != "sqlite" {
		yaml = hostsBackend(t, typ) + decl
	}
	env, p := appliedEnv(t, yaml)
	log := filepath.Join(t.TempDir(), "starts")
	cmd := fmt.Sprintf(`echo "$(date +%%s%%N) $COORDD_RATE_LIMIT" >> %s`, log)

	// The idle limit grants its burst at once; the next is refused.
	start := time.Now()
	for i := range 2 {
		if out, code := env.Run(t, "rate", "run", "api", "-f", p, "--no-wait", "--", "sh", "-c", cmd); code != 0 {
			t.Fatalf("permit %d of the burst: exit %d\n%s", i+1, code, out)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the burst took %v: an idle limit should grant it at once", d)
	}
	out, code := env.Run(t, "rate", "run", "api", "-f", p, "--no-wait", "--", "sh", "-c", cmd)
	switch took := time.Since(start); {
	case code == 75 && strings.Contains(out, "no permit granted"):
	case code == 0 && took >= rateIv:
		// Three process starts outlasted an interval (a loaded machine):
		// the next permit was due, and granting it was right.
		t.Logf("the burst and one more took %v, over one interval: the third permit was due", took)
	default:
		t.Fatalf("a permit beyond the burst with --no-wait %v after the first: exit %d, want 75\n%s", took, code, out)
	}

	// Six processes at a time, as fast as they get permits, for 3 s.
	const run = 3 * time.Second
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				out, code := env.Run(t, "rate", "run", "api", "-f", p, "--wait", "10s", "--", "sh", "-c", cmd)
				if code != 0 {
					t.Errorf("rate run: exit %d\n%s", code, out)
					return
				}
			}
		}()
	}
	wg.Wait()

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] != "api" {
			t.Fatalf("start line %q: want the time and COORDD_RATE_LIMIT=api", line)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Unix(0, ns))
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	const iv, burst, spawn = rateIv, 2, rateSpawn
	for i := range starts {
		for j := i; j < len(starts); j++ {
			w := starts[j].Sub(starts[i])
			if n, allowed := j-i+1, int((w+spawn)/iv)+burst; n > allowed {
				t.Fatalf("%d commands started within %v: more than rate × window + burst = %d\n%s", n, w, allowed, b)
			}
		}
	}
	// The processes were not starved: well over half the rate over the
	// run (the first 2 permits and the refusal came before it).
	if got, want := len(starts)-2, int(run/iv)/2; got < want {
		t.Fatalf("%d commands started in %v, want at least %d", got, run, want)
	}
	t.Logf("%s: %d starts in %v", typ, len(starts), starts[len(starts)-1].Sub(starts[0]))
}

// TestQueueWorkWithRateLimit: two `coordd queue work` processes of a queue
// that names a rate limit start its jobs no faster than rate × window +
// burst over any window (250 ms for a process spawn), and drain it, on
// every backend that holds rate limits.
func TestQueueWorkWithRateLimit(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) { queueWorkRateLimit(t, typ) })
	}
}

func queueWorkRateLimit(t *testing.T, typ string) {
	const decl = "rate_limits:\n  api: {rate: 2/1s, burst: 2}\nqueues:\n  q: {rate_limit: api}\n" // one per 500ms
	yaml := decl
	if typ != "sqlite" {
		yaml = hostsBackend(t, typ) + decl
	}
	env, p := appliedEnv(t, yaml)
	const jobs = 10
	for range jobs {
		if out, code := env.Run(t, "queue", "push", "q", "-f", p, "x"); code != 0 {
			t.Fatalf("push: %d\n%s", code, out)
		}
	}
	log := filepath.Join(t.TempDir(), "starts")
	cmd := fmt.Sprintf(`date +%%s%%N >> %s`, log)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, code := env.Run(t, "queue", "work", "q", "-f", p, "--concurrency", "3", "--drain", "--", "sh", "-c", cmd); code != 0 {
				t.Errorf("queue work: exit %d\n%s", code, out)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for _, f := range strings.Fields(string(b)) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Unix(0, ns))
	}
	if len(starts) != jobs {
		t.Fatalf("%d jobs ran, want %d", len(starts), jobs)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	const iv, burst, spawn = rateIv, 2, rateSpawn
	for i := range starts {
		for j := i; j < len(starts); j++ {
			w := starts[j].Sub(starts[i])
			if n, allowed := j-i+1, int((w+spawn)/iv)+burst; n > allowed {
				t.Fatalf("%d jobs started within %v: more than rate × window + burst = %d\n%s", n, w, allowed, b)
			}
		}
	}
}

// TestCronRunTakesAPermit: a cron task that names a rate limit takes a
// permit before its command starts: with one permit per 2 s and a burst
// of 1, the second of two `cron run`s in a row starts about 2 s after the
// first (300 ms allowed for the first command's spawn); on every backend
// that holds rate limits.
func TestCronRunTakesAPermit(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "starts")
			decl := fmt.Sprintf("rate_limits:\n  api: {rate: 1/2s}\ncron:\n  c: {schedule: \"@yearly\", command: 'date +%%s%%N >> %s', rate_limit: api, overlap: allow}\n", log)
			yaml := decl
			if typ != "sqlite" {
				yaml = hostsBackend(t, typ) + decl
			}
			env, p := appliedEnv(t, yaml)
			for i := range 2 {
				if out, code := env.Run(t, "cron", "run", "c", "-f", p); code != 0 {
					t.Fatalf("cron run %d: exit %d\n%s", i+1, code, out)
				}
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(b))
			if len(f) != 2 {
				t.Fatalf("%d runs logged, want 2:\n%s", len(f), b)
			}
			a, _ := strconv.ParseInt(f[0], 10, 64)
			c, _ := strconv.ParseInt(f[1], 10, 64)
			if gap := time.Duration(c - a); gap < 1700*time.Millisecond {
				t.Fatalf("the second run started %v after the first, before its permit was due (2s)", gap)
			}
		})
	}
}

// TestCronRunPushesAJob: `coordd cron run` of a task that pushes a job
// pushes it, its placeholders written out, and `queue work` gets it, on
// every backend that holds queues.
func TestCronRunPushesAJob(t *testing.T) {
	for _, typ := range []string{"sqlite", "mysql", "postgres", "redis"} {
		t.Run(typ, func(t *testing.T) {
			decl := "queues:\n  q: {}\ncron:\n  p: {schedule: \"@yearly\", push: {queue: q, payload: \"report for {task}\", key: \"{task}-{scheduled_at}\"}}\n"
			yaml := decl
			if typ != "sqlite" {
				yaml = hostsBackend(t, typ) + decl
			}
			env, p := appliedEnv(t, yaml)
			if out, code := env.Run(t, "cron", "run", "p", "-f", p); code != 0 || !strings.Contains(out, "pushed job") {
				t.Fatalf("cron run: exit %d\n%s", code, out)
			}
			out, code := env.Run(t, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", `cat; echo " key=$COORDD_JOB_ID"`)
			if code != 0 || !strings.Contains(out, "report for p") {
				t.Fatalf("queue work: exit %d\n%s", code, out)
			}
			if n := strings.Count(out, "report for p"); n != 1 {
				t.Fatalf("%d jobs worked, want 1:\n%s", n, out)
			}
		})
	}
}
