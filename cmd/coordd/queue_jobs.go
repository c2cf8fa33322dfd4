package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/safetext"
)

// The queue browser's commands: a page of one state, one job, and the two
// actions on a job that has not run yet.

// jobCut bounds the payload and last error a listing reads of each job;
// queue job reads up to jobDetailCut.
const (
	jobCut       = 256
	jobDetailCut = 64 << 10
)

// browsedJobJSON is a job as queue jobs and queue job print it.
type browsedJobJSON struct {
	ID         int64      `json:"id"`
	State      string     `json:"state"`
	Key        string     `json:"key,omitempty"`
	Priority   int        `json:"priority"`
	Partition  int        `json:"partition"`
	Attempt    int        `json:"attempt"`
	EnqueuedAt time.Time  `json:"enqueued_at"`
	Available  time.Time  `json:"available_at"`
	ExpiresAt  *time.Time `json:"lease_expires_at,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	// Payload is the payload as text when it is valid UTF-8, else absent
	// (PayloadBase64 has it); either is cut at the read's bound, and
	// PayloadSize is the whole length.
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
	PayloadSize   int64   `json:"payload_size"`
	Truncated     bool    `json:"payload_truncated,omitempty"`
	// Errors are the failed attempts, oldest first (the newest
	// backends.MaxAttemptErrors are kept); queue job only.
	Errors []backends.AttemptError `json:"errors,omitempty"`
}

func browsedJob(j backends.PartialJob, state string) browsedJobJSON {
	out := browsedJobJSON{ID: j.ID, State: state, Key: j.Key, Priority: j.Priority, Partition: j.Partition, Attempt: j.Attempt,
		EnqueuedAt: j.EnqueuedAt, Available: j.AvailableAt, LastError: j.LastError, PayloadSize: j.PayloadSize, Truncated: j.Truncated(),
		Errors: j.Errors}
	if !j.ExpiresAt.IsZero() {
		e := j.ExpiresAt
		out.ExpiresAt = &e
	}
	if utf8.Valid(j.Payload) {
		p := string(j.Payload)
		out.Payload = &p
	} else {
		out.PayloadBase64 = j.Payload
	}
	return out
}

// queueJobs lists one page of one state.
func queueJobs(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	state := fs.String("state", backends.JobReady, "ready, delayed, running or dead")
	key := fs.String("key", "", "only the jobs of this key")
	limit := fs.Int("limit", 50, "jobs per page (1 to 1000)")
	offset := fs.Int("offset", 0, "jobs to skip")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd queue jobs: want exactly one queue NAME")
		return 1
	}
	if err := backends.CheckJobState(*state); err != nil {
		fmt.Fprintf(env.stderr, "coordd queue jobs: --state: %v\n", err)
		return 1
	}
	if *limit < 1 || *limit > 1000 || *offset < 0 {
		fmt.Fprintln(env.stderr, "coordd queue jobs: --limit is 1 to 1000 and --offset at least 0")
		return 1
	}
	name := pos[0]
	q, done, code := openQueues(ctx, env, "coordd queue jobs", *path, name, true)
	if q == nil {
		return code
	}
	defer done()
	jobs, err := q.JobsPage(ctx, name, backends.JobPage{State: *state, Key: *key, Offset: *offset, Limit: *limit, Cut: jobCut})
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue jobs: %v\n", err)
		return 1
	}
	out := make([]browsedJobJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, browsedJob(j, *state))
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	if len(out) == 0 {
		fmt.Fprintf(env.stdout, "queue.%s has no %s jobs%s\n", name, *state, pageNote(*offset))
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tKEY\tPRIORITY\tATTEMPT\tENQUEUED\t%s\tPAYLOAD\tLAST ERROR\n", stateTimeColumn(*state))
	for _, j := range out {
		k := "-"
		if j.Key != "" {
			k = esc(j.Key)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", j.ID, k, j.Priority, j.Attempt, j.EnqueuedAt.UTC().Format(time.RFC3339),
			stateTime(j), esc(payloadCell(j)), esc(errorCell(orDash(j.LastError))))
	}
	tw.Flush()
	if len(out) == *limit {
		fmt.Fprintf(env.stdout, "more: --offset %d\n", *offset+*limit)
	}
	return 0
}

// stateTimeColumn names the time a state's listing shows.
func stateTimeColumn(state string) string {
	switch state {
	case backends.JobDelayed:
		return "DUE"
	case backends.JobRunning:
		return "LEASE ENDS"
	case backends.JobDead:
		return "DIED"
	}
	return "READY SINCE"
}

func stateTime(j browsedJobJSON) string {
	if j.State == backends.JobRunning && j.ExpiresAt != nil {
		return j.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return j.Available.UTC().Format(time.RFC3339)
}

// payloadCell is a payload in a table: its text on one line, or its size
// when it is binary.
func payloadCell(j browsedJobJSON) string {
	if j.Payload == nil {
		return fmt.Sprintf("(%d bytes, binary)", j.PayloadSize)
	}
	s := oneLine(*j.Payload)
	if len(s) > 60 {
		cut := 60
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	} else if j.Truncated {
		s += "..."
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pageNote(offset int) string {
	if offset > 0 {
		return fmt.Sprintf(" after the first %d", offset)
	}
	return ""
}

// queueJob shows one job in any state.
func queueJob(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, id, ok := queueAndID(env, "coordd queue job", pos)
	if !ok {
		return 1
	}
	q, done, code := openQueues(ctx, env, "coordd queue job", *path, name, true)
	if q == nil {
		return code
	}
	defer done()
	j, state, err := q.JobByID(ctx, name, id, jobDetailCut)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue job: %v\n", err)
		return 1
	}
	out := browsedJob(j, state)
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Job:", fmt.Sprintf("%d of queue.%s", out.ID, name))
	row("State:", out.State)
	row("Key:", esc(orDash(out.Key)))
	row("Priority:", strconv.Itoa(out.Priority))
	row("Attempt:", strconv.Itoa(out.Attempt))
	row("Enqueued:", out.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	row(stateTimeColumn(out.State)[:1]+strings.ToLower(stateTimeColumn(out.State)[1:])+":", stateTime(out))
	size := fmt.Sprintf("%d bytes", out.PayloadSize)
	if out.Truncated {
		size += fmt.Sprintf(" (the first %d shown)", jobDetailCut)
	}
	row("Payload:", size)
	tw.Flush()
	if out.Payload != nil {
		fmt.Fprintf(env.stdout, "\n%s\n", textBlock(*out.Payload))
	} else {
		fmt.Fprintln(env.stdout, "\n(binary: --json has it in payload_base64)")
	}
	switch {
	case len(out.Errors) > 0:
		printAttemptErrors(env, out.Errors)
	case out.LastError != "":
		fmt.Fprintf(env.stdout, "\nLast error:\n%s\n", textBlock(out.LastError))
	}
	return 0
}

// printAttemptErrors prints each failed attempt with its time, worker and
// error, indented under it.
func printAttemptErrors(env *cliEnv, errs []backends.AttemptError) {
	fmt.Fprintf(env.stdout, "\nFailed attempts (the newest %d are kept):\n", backends.MaxAttemptErrors)
	for _, e := range errs {
		fmt.Fprintf(env.stdout, "  attempt %d at %s on %s:\n", e.Attempt, e.At.UTC().Format(time.RFC3339Nano), esc(orDash(e.Worker)))
		for _, l := range strings.Split(textBlock(e.Error), "\n") {
			fmt.Fprintf(env.stdout, "    %s\n", l)
		}
	}
}

// queueCancel deletes a ready or delayed job.
func queueCancel(ctx context.Context, c *command, env *cliEnv, args []string) int {
	return queueJobAction(ctx, c, env, args, "coordd queue cancel", "canceled", func(q backends.Queues) func(context.Context, string, int64) error {
		return q.CancelJob
	})
}

// queueRunNow makes a delayed job ready now.
func queueRunNow(ctx context.Context, c *command, env *cliEnv, args []string) int {
	return queueJobAction(ctx, c, env, args, "coordd queue run-now", "ready now:", func(q backends.Queues) func(context.Context, string, int64) error {
		return q.RunJobNow
	})
}

func queueJobAction(ctx context.Context, c *command, env *cliEnv, args []string, cmd, done string, op func(backends.Queues) func(context.Context, string, int64) error) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, id, ok := queueAndID(env, cmd, pos)
	if !ok {
		return 1
	}
	q, closeQ, code := openQueues(ctx, env, cmd, *path, name, false)
	if q == nil {
		return code
	}
	defer closeQ()
	if err := op(q)(ctx, name, id); err != nil {
		msg := err.Error()
		if errors.Is(err, backends.ErrNotFound) {
			msg += " (queue job shows where it is)"
		}
		fmt.Fprintf(env.stderr, "%s: %s\n", cmd, msg)
		return 1
	}
	fmt.Fprintf(env.stdout, "%s job %d of queue.%s\n", done, id, name)
	return 0
}

// queueAndID reads the NAME ID arguments.
func queueAndID(env *cliEnv, cmd string, pos []string) (string, int64, bool) {
	if len(pos) != 2 {
		fmt.Fprintf(env.stderr, "%s: want a queue NAME and a job ID\n", cmd)
		return "", 0, false
	}
	id, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || id < 1 {
		fmt.Fprintf(env.stderr, "%s: job ID must be a positive integer, as queue push printed it, got %s\n", cmd, strconv.Quote(pos[1]))
		return "", 0, false
	}
	return pos[0], id, true
}

// openQueues opens name's backend and returns its queues and how to close
// it; nil and the exit code when it cannot.
func openQueues(ctx context.Context, env *cliEnv, cmd, path, name string, readOnly bool) (backends.Queues, func(), int) {
	t, err := openQueue(ctx, env, path, name, readOnly)
	if err != nil {
		reportErr(env, cmd, err)
		return nil, nil, 1
	}
	q := t.backend.Queues()
	if q == nil {
		t.backend.Close()
		fmt.Fprintf(env.stderr, "%s: backend %q cannot hold queues\n", cmd, t.local.Backend)
		return nil, nil, 1
	}
	return q, func() { t.backend.Close() }, 0
}

// textBlock prints free text line by line, each line escaped on its own
// (safetext.Text), so that a payload or a stderr tail keeps its lines and
// still cannot move the cursor or forge output.
func textBlock(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = safetext.Text(l)
	}
	return strings.Join(lines, "\n")
}
