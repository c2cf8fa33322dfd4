package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/queue"
)

// queueFixture applies a spec with queue q declared by decl (a flow map)
// and returns its path; the data dir is the CLI's.
func queueFixture(t *testing.T, c *cli, decl string) string {
	t.Helper()
	p := writeSpec(t, "queues:\n  q: "+decl+"\n")
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	return p
}

func queueStatsOf(t *testing.T, c *cli, specPath string) queueStatsJSON {
	t.Helper()
	code, out, errs := c.run("", false, "queue", "stats", "q", "-f", specPath, "--json")
	if code != 0 {
		t.Fatalf("queue stats: %d %s", code, errs)
	}
	var rows []queueStatsJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || !rows[0].Applied {
		t.Fatalf("queue stats --json: %v\n%s", err, out)
	}
	return rows[0]
}

func TestQueuePushDedupDeadRequeue(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 2, visibility_timeout: 10s, max_attempts: 2, retry_backoff: 0s, unique: pending, max_payload: 16}")

	code, first, errs := c.run("", false, "queue", "push", "q", "-f", p, "--key", "k", "one")
	if code != 0 || strings.TrimSpace(first) == "" {
		t.Fatalf("push: %d %q %s", code, first, errs)
	}
	code, again, errs := c.run("", false, "queue", "push", "q", "--key", "k", "-f", p, "two")
	if code != 0 || again != first || !strings.Contains(errs, "already queued") {
		t.Fatalf("duplicate push: exit %d, id %q (first %q), %s", code, again, first, errs)
	}
	// stdin, explicitly and by default.
	if code, out, errs := c.run("from stdin\n", false, "queue", "push", "q", "-f", p, "-"); code != 0 || out == first {
		t.Fatalf("push from stdin: %d %q %s", code, out, errs)
	}
	if code, _, errs := c.run("seventeen bytes!!", false, "queue", "push", "q", "-f", p); code != 1 || !strings.Contains(errs, "exceeds max_payload 16") {
		t.Fatalf("oversized push from stdin: %d %s", code, errs)
	}
	if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "seventeen bytes!!"); code != 1 || !strings.Contains(errs, "exceeds max_payload 16") {
		t.Fatalf("oversized push: %d %s", code, errs)
	}
	if code, _, errs := c.run("", false, "queue", "push", "nope", "-f", p, "x"); code != 1 || !strings.Contains(errs, "not declared") {
		t.Fatalf("push to an undeclared queue: %d %s", code, errs)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 2 || st.Dead != 0 {
		t.Fatalf("stats after pushes: %+v", st)
	}

	// A failing command retries, then the jobs die.
	// Their stderr's end is kept with the error.
	if code, _, errs := c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--concurrency", "2", "--", "sh", "-c", "cat >/dev/null; echo decoding >&2; echo cannot decode image >&2; exit 3"); code != 0 {
		t.Fatalf("work --drain: %d %s", code, errs)
	}
	code, out, errs := c.run("", false, "queue", "dead", "q", "-f", p)
	if code != 0 || !strings.Contains(out, strings.TrimSpace(first)) || strings.Count(out, "exit status 3; stderr: decoding cannot decode image") != 2 {
		t.Fatalf("queue dead: %d\n%s\n%s", code, out, errs)
	}
	_, js, _ := c.run("", false, "queue", "dead", "q", "-f", p, "--json")
	if strings.Count(js, `"last_error": "exit status 3; stderr: decoding\ncannot decode image"`) != 2 {
		t.Fatalf("queue dead --json:\n%s", js)
	}
	var deadJobs []struct {
		EnqueuedAt time.Time `json:"enqueued_at"`
		DiedAt     time.Time `json:"died_at"`
	}
	if err := json.Unmarshal([]byte(js), &deadJobs); err != nil || len(deadJobs) != 2 {
		t.Fatalf("queue dead --json (%v):\n%s", err, js)
	}
	for _, j := range deadJobs {
		if j.DiedAt.Before(j.EnqueuedAt) || time.Since(j.DiedAt) > time.Minute {
			t.Errorf("a dead job died at %s (enqueued %s), want a moment ago", j.DiedAt, j.EnqueuedAt)
		}
	}
	if !strings.Contains(out, "ENQUEUED              DIED") {
		t.Errorf("queue dead has no DIED column:\n%s", out)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 0 || st.InFlight != 0 || st.Dead != 2 {
		t.Fatalf("stats after the failures: %+v", st)
	}
	// Requeue brings them back; a succeeding command acks them, and sees
	// the payload and the job's variables.
	if code, out, errs := c.run("", false, "queue", "dead", "q", "-f", p, "--requeue"); code != 0 || !strings.Contains(out, "requeued 2") {
		t.Fatalf("requeue: %d %s %s", code, out, errs)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 2 || st.Dead != 0 {
		t.Fatalf("stats after requeue: %+v", st)
	}
	code, out, errs = c.run("", false, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", `read -r p; echo "$COORDD_QUEUE $COORDD_JOB_ID $COORDD_ATTEMPT $p"`)
	if code != 0 || !strings.Contains(out, "q "+strings.TrimSpace(first)+" 1 one") || !strings.Contains(out, " 1 from stdin") {
		t.Fatalf("work after requeue: %d\n%s\n%s", code, out, errs)
	}
	if st := queueStatsOf(t, c, p); st.Ready+st.InFlight+st.Delayed+st.Dead != 0 {
		t.Fatalf("stats at the end: %+v", st)
	}
	if code, out, _ := c.run("", false, "queue", "dead", "q", "-f", p, "--purge"); code != 0 || !strings.Contains(out, "purged 0 dead jobs of queue.q") {
		t.Fatalf("purge: %d %s", code, out)
	}
	if code, _, errs := c.run("", false, "queue", "work", "q", "-f", p); code != 1 || !strings.Contains(errs, "missing command") {
		t.Fatalf("work without a command: %d %s", code, errs)
	}
}

func TestQueueNotApplied(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, "queues:\n  q: {}\n")
	if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "x"); code != 1 || !strings.Contains(errs, "not applied; run coordd apply") {
		t.Fatalf("push before apply: %d %s", code, errs)
	}
}

// countLines counts the lines of path (0 when absent).
func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// TestQueueWorkKill9 works 10,000 jobs with four worker processes and kills
// one with kill -9 a quarter of the way. Evidence outside coordd (an
// append-only log the commands write) shows every job ran, and that every
// job that ran twice was in the killed worker's hands.
// TestHostsQueueWorkKill9 runs the same on MySQL and Redis with three daemons.
func TestQueueWorkKill9(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 4, visibility_timeout: 2s, max_attempts: 10, retry_backoff: 0s}")
	// 5,000 jobs drain in about 3 minutes on a loaded 2-core machine (the
	// embedded store's workers are separate processes sharing one file).
	jobs := 5000
	if testing.Short() {
		jobs = 300
	}
	queueWorkKill9(t, c, p, queueKill9{jobs: jobs, workers: 4, conc: 2, killAt: []int{jobs / 4}})
}

// queueKill9 parametrizes queueWorkKill9.
type queueKill9 struct {
	jobs    int
	workers int // worker processes w0, w1, ...
	conc    int // --concurrency of each
	// killAt[i]: worker wi gets kill -9 once this many jobs ran.
	killAt []int
	// hosts, when set, are the workers' --host-id, round robin.
	hosts []string
}

// queueWorkKill9 pushes k.jobs jobs to queue q of the applied spec p,
// drains them with k.workers `queue work --drain` processes, kills some
// with kill -9 on the way, and checks the commands' own log.
func queueWorkKill9(t *testing.T, c *cli, p string, k queueKill9) {
	t.Helper()
	// Push quickly through the Go API.
	ctx := context.Background()
	s, ok := loadSpec(context.Background(), &cliEnv{stderr: os.Stderr}, p, false)
	if !ok {
		t.Fatal("load spec")
	}
	b, err := open.Open(ctx, s.Backends[s.Queues["q"].Backend], backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := queue.New(b)
	if err != nil {
		t.Fatal(err)
	}
	jobs := k.jobs
	begin := time.Now()
	payloadOf := map[string]string{}
	for i := range jobs {
		pl := fmt.Sprintf("job-%d", i)
		j, err := cl.Push(ctx, "q", []byte(pl+"\n"), queue.PushOptions{})
		if err != nil {
			t.Fatal(err)
		}
		payloadOf[strconv.FormatInt(j.ID, 10)] = pl
	}
	b.Close()
	t.Logf("pushed %d jobs in %s", jobs, time.Since(begin).Round(time.Millisecond))
	begin = time.Now()

	logPath := filepath.Join(t.TempDir(), "acked.log")
	script := `read -r p; echo "$p $COORDD_JOB_ID $WORKER" >> ` + logPath
	conc := k.conc
	workers := make([]*exec.Cmd, k.workers)
	// Read while the workers may still write (a failure's message): a
	// synchronized buffer.
	stderrs := make([]*proctest.SyncBuffer, len(workers))
	done := make([]chan error, len(workers))
	for i := range workers {
		// The workers are a plain build of coordd (proctest.Binary), not
		// this race-instrumented test binary: 10,000 jobs through four
		// race-built processes on two cores would measure the race
		// detector, not coordd.
		args := []string{"queue", "work", "q", "-f", p, "--concurrency", strconv.Itoa(conc), "--drain"}
		if len(k.hosts) > 0 {
			args = append(args, "--host-id", k.hosts[i%len(k.hosts)])
		}
		w := exec.Command(proctest.Binary(t), append(args, "--", "sh", "-c", script)...)
		w.Env = append(os.Environ(), "COORDD_DATA_DIR="+c.dataDir, fmt.Sprintf("WORKER=w%d", i))
		stderrs[i] = &proctest.SyncBuffer{}
		w.Stderr = stderrs[i]
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		workers[i], done[i] = w, make(chan error, 1)
		go func() { done[i] <- w.Wait() }()
	}
	defer func() {
		for i, w := range workers {
			_ = w.Process.Kill()
			<-done[i]
			done[i] <- nil // for a second look
		}
	}()

	killed := map[string]bool{}
	for i, at := range k.killAt {
		deadline := time.Now().Add(4 * time.Minute)
		for countLines(logPath) < at {
			if time.Now().After(deadline) {
				t.Fatalf("only %d jobs ran within 4m", countLines(logPath))
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = workers[i].Process.Signal(syscall.SIGKILL)
		err := <-done[i]
		done[i] <- err
		killed[fmt.Sprintf("w%d", i)] = true
		t.Logf("killed w%d after %d lines (%s)", i, countLines(logPath), time.Since(begin).Round(time.Millisecond))
	}
	for i := len(k.killAt); i < len(workers); i++ {
		select {
		case err := <-done[i]:
			done[i] <- err
			if err != nil {
				t.Fatalf("worker w%d: %v\n%s", i, err, stderrs[i])
			}
		case <-time.After(6 * time.Minute):
			t.Fatalf("worker w%d did not drain within 6m\n%s", i, stderrs[i])
		}
	}

	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ranBy := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("malformed evidence line %q", line)
		}
		if payloadOf[f[1]] != f[0] {
			t.Fatalf("job %s ran with payload %q, pushed %q", f[1], f[0], payloadOf[f[1]])
		}
		ranBy[f[1]] = append(ranBy[f[1]], f[2])
	}
	// A job may run twice when it was in a killed worker's hands, or when
	// a surviving worker reported that it lost the job's lease (SQLite
	// write-lock waits under -race on a small machine can outlast a lease)
	// and so did not ack it over its next owner.
	var reported strings.Builder
	for i := range stderrs {
		reported.WriteString(stderrs[i].String())
	}
	lossReported := func(id string) bool {
		r := reported.String()
		return strings.Contains(r, "job "+id+" ") || strings.Contains(r, "job "+id+":")
	}
	heldByKilled := func(by []string) bool {
		return slices.ContainsFunc(by, func(w string) bool { return killed[w] })
	}
	byKill, byLoss := 0, 0
	for id := range payloadOf {
		by := ranBy[id]
		switch {
		case len(by) == 0:
			t.Errorf("job %s never ran", id)
		case len(by) > 1 && lossReported(id):
			byLoss++
		case len(by) > 1 && heldByKilled(by):
			byKill++
		case len(by) > 1:
			t.Errorf("job %s ran %d times (%v): neither a killed worker nor a reported lease loss explains it", id, len(by), by)
		}
	}
	if byKill > conc*len(k.killAt) {
		t.Errorf("%d jobs of the killed workers ran twice; they held at most %d", byKill, conc*len(k.killAt))
	}
	t.Logf("%d lines for %d jobs in %s; ran twice: %d in a killed worker's hands, %d after a reported lease loss",
		strings.Count(string(raw), "\n"), jobs, time.Since(begin).Round(time.Millisecond), byKill, byLoss)
	if t.Failed() {
		for i := range stderrs {
			t.Logf("w%d stderr:\n%s", i, stderrs[i])
		}
	}
	if st := queueStatsOf(t, c, p); st.Ready+st.InFlight+st.Delayed+st.Dead != 0 {
		t.Fatalf("queue not empty: %+v", st)
	}
}

// TestQueueWorkSIGTERM: a signal stops claiming and is forwarded to the
// running command, which finishes its job; work exits 0 and the other job
// stays queued.
func TestQueueWorkSIGTERM(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 1, visibility_timeout: 10s}")
	for _, pl := range []string{"a", "b"} {
		if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, pl); code != 0 {
			t.Fatalf("push: %s", errs)
		}
	}
	dir := t.TempDir()
	started, evidence := filepath.Join(dir, "started"), filepath.Join(dir, "evidence")
	script := fmt.Sprintf(`trap 'echo "term $COORDD_JOB_ID" >> %[2]s; exit 0' TERM; echo $$ > %[1]s; sleep 30 & wait`, started, evidence)
	w := coorddCmd(t, c.dataDir, "queue", "work", "q", "-f", p, "--", "sh", "-c", script)
	var stderr bytes.Buffer
	w.Stderr = &stderr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, started, 10*time.Second)
	_ = w.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, w.Wait()); code != 0 {
		t.Fatalf("work after SIGTERM: exit %d\n%s", code, stderr.String())
	}
	if got := waitFile(t, evidence, time.Second); !strings.HasPrefix(got, "term ") {
		t.Fatalf("evidence %q", got)
	}
	if st := queueStatsOf(t, c, p); st.Ready != 1 || st.InFlight != 0 || st.Dead != 0 {
		t.Fatalf("stats after the stop: %+v", st)
	}
}

// TestQueueWorkAfterHungClaim: a claim that hangs in a stalled store for
// most of the visibility timeout renews the lease before the command
// starts, so the command runs to the end and the job is acked once.
func TestQueueWorkAfterHungClaim(t *testing.T) {
	c := newCLI(t)
	p := queueFixture(t, c, "{partitions: 1, visibility_timeout: 1s}")
	if code, _, errs := c.run("", false, "queue", "push", "q", "-f", p, "x"); code != 0 {
		t.Fatalf("push: %s", errs)
	}
	evidence := filepath.Join(t.TempDir(), "evidence")
	stall := &testenv.SQLiteStall{Path: filepath.Join(c.dataDir, "coordd.db")}
	w := coorddCmd(t, c.dataDir, "queue", "work", "q", "-f", p, "--drain", "--", "sh", "-c", "sleep 0.6; echo $COORDD_ATTEMPT >> "+evidence)
	var stderr bytes.Buffer
	w.Stderr = &stderr
	stall.Kill()
	released := stall.ReleaseAfter(t, 800*time.Millisecond) // the claim waits on the lock meanwhile
	if err := w.Start(); err != nil {
		<-released
		t.Fatal(err)
	}
	err := w.Wait()
	<-released
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("work: exit %d\n%s", code, stderr.String())
	}
	if got, _ := os.ReadFile(evidence); string(got) != "1\n" {
		t.Fatalf("attempts that ran to the end: %q, want one first attempt\n%s", got, stderr.String())
	}
}
