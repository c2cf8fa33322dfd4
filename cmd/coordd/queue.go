package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/spec"
)

var queueCmd = &command{
	name:    "queue",
	summary: "push jobs, run workers, show and repair queues",
	usage: `Usage:
  coordd queue push NAME [-f PATH] [--delay D] [--key K] [--priority N] [PAYLOAD | -]
  coordd queue work NAME [-f PATH] [--concurrency N] [--drain [--ready-only]] [--host-id ID] -- CMD ARGS...
  coordd queue stats [NAME...] [-f PATH] [--json]
  coordd queue dead NAME [-f PATH] [--requeue | --purge] [--json]
  coordd queue jobs NAME [-f PATH] [--state S] [--key K] [--limit N] [--offset N] [--json]
  coordd queue job NAME ID [-f PATH] [--json]
  coordd queue cancel NAME ID [-f PATH]
  coordd queue run-now NAME ID [-f PATH]
  coordd queue pause NAME --reason TEXT [-f PATH] [--host-id ID] [--json]
  coordd queue resume NAME [-f PATH] [--json]

queue push enqueues one job and prints its id. The payload is PAYLOAD, or
stdin when it is "-" or absent. Jobs are claimed highest --priority first
(-100 to 100, default 0), oldest first within one priority; the jobs of
one --key run one at a time, in push order whatever their priority
(claim: partition). Under the
queue's unique setting a push whose --key is already pending is not pushed
again: it prints the existing job's id and exits 0. A payload over
max_payload is an error.

queue work claims jobs of queue NAME and runs CMD once per job, up to
--concurrency at a time; one claim takes as many jobs as there are free
slots, and each starts at once. The payload is CMD's stdin; CMD gets COORDD_QUEUE,
COORDD_JOB_ID and COORDD_ATTEMPT. Exit 0 acks the job; anything else retries
it after retry_backoff, and after max_attempts attempts it moves to the dead
set. The job's visibility lease is renewed while CMD runs; CMD never outlives
it (TERM, then KILL before the lease ends), and it is stopped after the
queue's timeout, if one is set. With --drain, work exits once no job is
ready, delayed or in flight; while it waits for delayed or in-flight jobs
it says so on stderr (once per change: "draining: waiting for 1 delayed
job, due at 17:57:00 UTC"). --ready-only (implies --drain) exits once no
job is ready now and its own commands have finished, without waiting for
delayed jobs or for the jobs of other workers. On SIGINT or SIGTERM it stops claiming, forwards
the signal to the running commands and exits 0 once they have finished.

If CMD cannot be started (not found, not executable), work claims nothing
and exits 127 or 126. If a start fails later (CMD was removed, its #!
interpreter is missing), the job goes back to the queue without counting an
attempt, no new job is claimed, and work exits 127, 126 or 1 once the
running commands have finished. A CMD that runs and exits 127 itself is a
failed attempt like any other. CMD does not inherit the environment
variables that the spec's backend connection fields reference (unless
cluster.child_env is inherit).

queue stats shows ready (now), in-flight, delayed (a delayed push or a
retry in its backoff) and dead jobs and the age of the oldest ready job;
coordd status and /metrics count them the same way. queue dead lists dead jobs, or with --requeue makes them
ready again (attempts reset), or with --purge deletes them, printing how many.

queue jobs lists one state of a queue's jobs, a page at a time (--limit 50
by default): ready (now; push order), delayed (a delayed push, a retry in
its backoff; by due time), running (claimed; by lease deadline) or dead,
optionally only those of one --key. queue job shows one job in any state:
its payload, attempts, times and last error with the stderr tail of its
last failed attempt. queue cancel deletes a ready or delayed job that must
not run; queue run-now makes a delayed job ready now, attempts kept. A job
in flight or dead is refused (exit 1): queue dead acts on dead jobs.

queue pause stops every worker of the queue, on every host, from claiming
(each reads the pause about once a second; --drain waits while paused);
jobs in flight finish and pushes are still taken. The pause records who
(--host-id, default the hostname), when (the backend's clock) and why
(--reason, required), shows in status, queue stats, /metrics and the
dashboard, and survives an apply. queue resume removes it.

Exit status: 0 ok, 1 error; queue work also 126 (CMD not executable) and
127 (CMD not found).
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		return dispatch(ctx, c, env, args, map[string]runFunc{
			"push":    queuePush,
			"work":    queueWork,
			"stats":   queueStats,
			"dead":    queueDead,
			"jobs":    queueJobs,
			"job":     queueJob,
			"cancel":  queueCancel,
			"run-now": queueRunNow,
			"pause":   queuePause,
			"resume":  queueResume,
		})
	},
}

// queueTarget is one queue resolved from the local spec, with its backend
// opened and its applied config read.
type queueTarget struct {
	name    string
	local   *spec.Queue
	backend backends.Backend
	applied backends.QueueConfig
	// unset: the variables the worker's commands must not inherit.
	unset []string
}

// openQueue loads the spec, finds name, opens its backend and reads the
// applied config, which is what the runtime enforces; a local difference is
// reported.
func openQueue(ctx context.Context, env *cliEnv, path, name string, readOnly bool) (*queueTarget, error) {
	s, ok := loadSpec(ctx, env, path, false)
	if !ok {
		return nil, errReported
	}
	local := s.Queues[name]
	if local == nil {
		return nil, fmt.Errorf("queue %q is not declared in %s", name, path)
	}
	adm, b, err := openAs(ctx, s, local.Backend, "queues", readOnly, backends.Backend.Queues)
	if err != nil {
		return nil, err
	}
	m, err := adm.ObserveQueues(ctx, []string{name})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("read queue %q: %w", name, err)
	}
	st := m[name]
	if st == nil {
		b.Close()
		return nil, fmt.Errorf("queue %q (backend %q) is not applied; run coordd apply", name, local.Backend)
	}
	a := st.Config
	if a.VisibilityTimeout != local.VisibilityTimeout || a.MaxAttempts != local.MaxAttempts || a.Timeout != local.Timeout || a.Unique != local.Unique || a.MaxPayload != local.MaxPayload {
		fmt.Fprintf(env.stderr, "coordd: warning: queue %q: the local spec differs from the applied one; the applied one is enforced (coordd plan shows the difference)\n", name)
	}
	return &queueTarget{name: name, local: local, backend: b, applied: a, unset: s.ChildEnvUnset()}, nil
}

func queuePush(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	delay := fs.Duration("delay", 0, "make the job claimable only after this long")
	key := fs.String("key", "", "the job's key: jobs of one key run one at a time in push order; the deduplication key under unique (at most 255 bytes of UTF-8, no control characters)")
	priority := fs.Int("priority", 0, fmt.Sprintf("among ready jobs, a higher priority is claimed first (%d to %d)", spec.MinPriority, spec.MaxPriority))
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	pos = append(pos, rest...)
	if len(pos) == 0 {
		fmt.Fprintln(env.stderr, "coordd queue push: missing queue NAME")
		return 1
	}
	if len(pos) > 2 {
		fmt.Fprintf(env.stderr, "coordd queue push: one PAYLOAD at most, got %q (quote it)\n", strings.Join(pos[1:], " "))
		return 1
	}
	if *delay < 0 {
		fmt.Fprintln(env.stderr, "coordd queue push: --delay must not be negative")
		return 1
	}
	// The key's limits are the backends' (spec.CheckKey): refused here,
	// before the spec is read or a backend opened.
	if err := spec.CheckKey(*key); err != nil {
		fmt.Fprintf(env.stderr, "coordd queue push: --key: %v\n", err)
		return 1
	}
	if err := spec.CheckPriority(*priority); err != nil {
		fmt.Fprintf(env.stderr, "coordd queue push: --priority: %v\n", err)
		return 1
	}
	name := pos[0]
	t, err := openQueue(ctx, env, *path, name, false)
	if err != nil {
		reportErr(env, "coordd queue push", err)
		return 1
	}
	defer t.backend.Close()

	var payload []byte
	truncated := false
	if len(pos) == 2 && pos[1] != "-" {
		payload = []byte(pos[1])
	} else {
		// Read one byte past max_payload: enough to refuse it, without
		// reading an endless stdin.
		limit := t.applied.MaxPayload
		if limit <= 0 {
			limit = 64 << 20
		}
		payload, err = io.ReadAll(io.LimitReader(env.stdin, limit+1))
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd queue push: read stdin: %v\n", err)
			return 1
		}
		truncated = int64(len(payload)) > limit
	}
	if t.applied.MaxPayload > 0 && int64(len(payload)) > t.applied.MaxPayload {
		more := ""
		if truncated {
			more = "more than "
		}
		fmt.Fprintf(env.stderr, "coordd queue push: %s: payload of %s%d bytes exceeds max_payload %d\n", name, more, t.applied.MaxPayload, t.applied.MaxPayload)
		return 1
	}
	cl, err := queue.New(t.backend)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue push: %v\n", err)
		return 1
	}
	j, err := cl.Push(ctx, name, payload, queue.PushOptions{Key: *key, Delay: *delay, Priority: *priority})
	switch {
	case err == nil:
	case errors.Is(err, backends.ErrDuplicate) && j.ID != 0:
		fmt.Fprintf(env.stderr, "coordd queue push: %s: key %q is already queued as job %d (unique: %s); not pushed again\n", name, *key, j.ID, t.applied.Unique)
	case errors.Is(err, backends.ErrPayloadTooLarge):
		fmt.Fprintf(env.stderr, "coordd queue push: %s: payload of %d bytes exceeds max_payload %d\n", name, len(payload), t.applied.MaxPayload)
		return 1
	default:
		fmt.Fprintf(env.stderr, "coordd queue push: %v\n", err)
		return 1
	}
	fmt.Fprintln(env.stdout, j.ID)
	return 0
}

// queueStatsJSON is one queue in `queue stats --json`.
type queueStatsJSON struct {
	Name     string `json:"name"`
	Backend  string `json:"backend"`
	Applied  bool   `json:"applied"`
	Ready    int64  `json:"ready"`
	InFlight int64  `json:"in_flight"`
	Delayed  int64  `json:"delayed"`
	Dead     int64  `json:"dead"`
	// OldestAge is the age in seconds of the oldest job ready now (0: none).
	OldestAge float64 `json:"oldest_age_seconds"`
	// Pause is an operator's pause (coordd queue pause); absent: none.
	Pause *backends.Pause `json:"pause,omitempty"`
	// LastHour and LastDay are what the workers of every host did in the
	// last hour and day (backends.QueueCounters).
	LastHour backends.QueueCount `json:"last_hour"`
	LastDay  backends.QueueCount `json:"last_day"`
}

func queueStats(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return 1
	}
	names := pos
	if len(names) == 0 {
		for n := range s.Queues {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	byBackend := map[string][]string{}
	for _, n := range names {
		q := s.Queues[n]
		if q == nil {
			fmt.Fprintf(env.stderr, "coordd queue stats: queue %q is not declared\n", n)
			return 1
		}
		byBackend[q.Backend] = append(byBackend[q.Backend], n)
	}
	states := map[string]*backends.QueueState{}
	counts := map[string]backends.QueueCounts{}
	nows := map[string]time.Time{}
	for bn, ns := range byBackend {
		adm, b, err := openAs(ctx, s, bn, "queues", true, backends.Backend.Queues)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd queue stats: %v\n", err)
			return 1
		}
		m, err := adm.ObserveQueues(ctx, ns)
		if err == nil {
			nows[bn], err = b.Now(ctx)
		}
		for _, n := range ns {
			if err == nil && m[n] != nil {
				counts[n], err = adm.ReadQueueCounts(ctx, n, 24*time.Hour)
			}
		}
		b.Close()
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd queue stats: %v\n", err)
			return 1
		}
		for n, st := range m {
			states[n] = st
		}
	}
	out := make([]queueStatsJSON, 0, len(names))
	for _, n := range names {
		bn := s.Queues[n].Backend
		row := queueStatsJSON{Name: n, Backend: bn}
		if st := states[n]; st != nil {
			row.Applied = true
			row.Ready, row.InFlight, row.Delayed, row.Dead, row.Pause = st.ReadyNow(), st.InFlight, st.Delayed, st.Dead, st.Paused
			if !st.OldestReady.IsZero() {
				row.OldestAge = max(nows[bn].Sub(st.OldestReady), 0).Seconds()
			}
			row.LastHour, row.LastDay = counts[n].Since(time.Hour), counts[n].Since(24*time.Hour)
		}
		out = append(out, row)
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	for _, r := range out {
		if !r.Applied {
			fmt.Fprintf(tw, "queue.%s\tnot applied (run coordd apply)\n", r.Name)
			continue
		}
		oldest := "-"
		if r.Ready > 0 {
			oldest = (time.Duration(r.OldestAge * float64(time.Second))).Round(time.Second).String()
		}
		paused := ""
		if r.Pause != nil {
			paused = "\tpaused " + describePause(r.Pause)
		}
		fmt.Fprintf(tw, "queue.%s\tbackend %s\tready %d\tin flight %d\tdelayed %d\tdead %d\toldest %s\tlast hour %d done, %d failed\tlast day %d done, %d failed%s\n",
			r.Name, r.Backend, r.Ready, r.InFlight, r.Delayed, r.Dead, oldest, r.LastHour.Processed, r.LastHour.Failed, r.LastDay.Processed, r.LastDay.Failed, paused)
	}
	tw.Flush()
	return 0
}

// deadJobJSON is one dead job in `queue dead --json`.
type deadJobJSON struct {
	ID         int64     `json:"id"`
	Key        string    `json:"key,omitempty"`
	Attempt    int       `json:"attempt"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// DiedAt is when its last attempt failed or its lease ran out, by the
	// backend's clock.
	DiedAt    time.Time `json:"died_at"`
	LastError string    `json:"last_error"`
}

func queueDead(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	requeue := fs.Bool("requeue", false, "make every dead job ready again, attempts reset")
	purge := fs.Bool("purge", false, "delete every dead job")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd queue dead: want exactly one queue NAME")
		return 1
	}
	if *requeue && *purge {
		fmt.Fprintln(env.stderr, "coordd queue dead: --requeue and --purge exclude each other")
		return 1
	}
	name := pos[0]
	t, err := openQueue(ctx, env, *path, name, !*requeue && !*purge)
	if err != nil {
		reportErr(env, "coordd queue dead", err)
		return 1
	}
	defer t.backend.Close()
	q := t.backend.Queues()
	if q == nil {
		fmt.Fprintf(env.stderr, "coordd queue dead: backend %q cannot hold queues\n", t.local.Backend)
		return 1
	}
	if *requeue || *purge {
		verb, op := "requeued", q.RequeueDead
		if *purge {
			verb, op = "purged", q.PurgeDead
		}
		n, err := op(ctx, name)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd queue dead: %v\n", err)
			return 1
		}
		if *asJSON {
			_ = json.NewEncoder(env.stdout).Encode(map[string]int64{verb: n})
		} else {
			fmt.Fprintf(env.stdout, "%s %d %s of queue.%s\n", verb, n, plural(n, "dead job", "dead jobs"), name)
		}
		return 0
	}
	jobs, err := q.Dead(ctx, name, 0)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue dead: %v\n", err)
		return 1
	}
	out := make([]deadJobJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, deadJobJSON{ID: j.ID, Key: j.Key, Attempt: j.Attempt, EnqueuedAt: j.EnqueuedAt, DiedAt: j.AvailableAt, LastError: j.LastError})
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	if len(out) == 0 {
		fmt.Fprintf(env.stdout, "queue.%s has no dead jobs\n", name)
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tATTEMPT\tENQUEUED\tDIED\tLAST ERROR")
	for _, j := range out {
		key := "-"
		if j.Key != "" {
			key = esc(j.Key)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", j.ID, key, j.Attempt, j.EnqueuedAt.UTC().Format(time.RFC3339), j.DiedAt.UTC().Format(time.RFC3339), esc(errorCell(j.LastError)))
	}
	tw.Flush()
	return 0
}

// errorCell is a last error in a table row: the reason, and of the
// command's stderr that queue work recorded after it, the end, where the
// reason usually is (--json has it all).
func errorCell(s string) string {
	reason, stderr, ok := strings.Cut(s, "; stderr: ")
	if !ok {
		return oneLine(s)
	}
	reason = oneLine(reason)
	stderr = strings.Join(strings.Fields(stderr), " ")
	if room := max(200-len(reason), 40); len(stderr) > room {
		cut := len(stderr) - room
		for cut < len(stderr) && !utf8.RuneStart(stderr[cut]) {
			cut++
		}
		stderr = "..." + stderr[cut:]
	}
	return reason + "; stderr: " + stderr
}

// oneLine keeps a table row on one line: white space runs become one
// space, and the text is cut at a character boundary after 200 bytes.
// What it leaves is still to be escaped (esc).
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		cut := 200
		for cut > 196 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
