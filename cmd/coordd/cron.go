package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/safetext"
	"github.com/coordd/coordd/internal/version"
	"github.com/coordd/coordd/ratelimit"
	"github.com/coordd/coordd/scheduler"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

var cronCmd = &command{
	name:    "cron",
	summary: "run a cron task now; list tasks; show a task's history; pause and resume a task",
	usage: `Usage:
  coordd cron run NAME [-f PATH] [--host-id ID]
  coordd cron list [-f PATH] [--utc] [--json]
  coordd cron history NAME [-f PATH] [--limit N] [--utc] [--json]
  coordd cron pause NAME --reason TEXT [-f PATH] [--host-id ID] [--json]
  coordd cron resume NAME [-f PATH] [--json]

cron run runs task NAME now, in this process, as the applied spec defines it
(command, env, workdir, timeout, semaphore, overlap), and records the run in
the task's history as manual. The command gets COORDD_TASK,
COORDD_SCHEDULED_AT, COORDD_ATTEMPT, COORDD_RUN_ID, COORDD_TASK_FENCING_TOKEN
and COORDD_FENCING_TOKEN (with a semaphore: the slot's number, and
COORDD_SEMAPHORE and COORDD_SLOT), and lacks the environment variables that
the spec's backend connection fields reference (unless cluster.child_env is
inherit).

cron list shows each task's schedule, next run and last result; cron history
shows a task's past runs, newest first. Times are shown in the task's
timezone (in UTC with --utc; --json always writes UTC). A run that never
ran its command (skipped, lost) has no exit code: "-" (null in JSON); one
in progress shows "running".

cron pause stops the scheduler from starting task NAME (incident response,
without a commit): the pause is stored in the task's backend with this host,
the backend's time and the reason, shown by status, cron list, plan and
/metrics, and kept by apply. A run in progress finishes; cron run still runs
it by hand. cron resume removes the pause; the times missed meanwhile follow
the task's catch_up. A task with paused: true in the spec stays paused until
git says otherwise (resume then exits 1 and says so).

Exit status of cron run:
  the command's code, or 128+N when signal N killed it
  75   overlap forbids it: a run is in progress (recorded as skipped)
  122  the run lease was lost while the command ran
  125  coordd failed (spec, unknown or unapplied task, backend)
  126  command not executable; 127 command not found
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		return dispatch(ctx, c, env, args, map[string]runFunc{
			"run":     cronRun,
			"list":    cronList,
			"history": cronHistory,
			"pause":   cronPause,
			"resume":  cronResume,
		})
	},
}

// cronView is one opened backend and its cron tasks.
type cronView struct {
	backends.Backend
	backends.Crons
}

func openCron(ctx context.Context, s *spec.Spec, backend string, readOnly bool) (cronView, error) {
	cr, b, err := openAs(ctx, s, backend, "cron tasks", readOnly, backends.Backend.Crons)
	return cronView{Backend: b, Crons: cr}, err
}

func cronRun(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	host := fs.String("host-id", "", "host id recorded with the run (default: the hostname)")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return child.ExitCoorddFailed
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd cron run: want exactly one task NAME")
		return child.ExitCoorddFailed
	}
	h, err := hostID(env, *host)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron run: %v\n", err)
		return child.ExitCoorddFailed
	}
	name := pos[0]
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return child.ExitCoorddFailed
	}
	local := s.Cron[name]
	if local == nil {
		fmt.Fprintf(env.stderr, "coordd cron run: cron task %q is not declared in %s\n", name, *path)
		return child.ExitCoorddFailed
	}
	b, err := openCron(ctx, s, local.Backend, false)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron run: %v\n", err)
		return child.ExitCoorddFailed
	}
	defer b.Close()
	var opened []backends.Backend
	defer func() {
		for _, o := range opened {
			o.Close()
		}
	}()
	// The scheduler names the semaphore in front of these errors
	// (`semaphore "s": not applied; ...`): they do not name it again.
	resolve := func(sem string) (*semaphore.Client, backends.SemaphoreConfig, error) {
		decl := s.Semaphores[sem]
		if decl == nil {
			return nil, backends.SemaphoreConfig{}, fmt.Errorf("not declared in %s", *path)
		}
		sb, err := open.Open(ctx, s.Backends[decl.Backend], backends.Options{Version: version.Version})
		if err != nil {
			return nil, backends.SemaphoreConfig{}, err
		}
		opened = append(opened, sb)
		adm := sb.Semaphores()
		if adm == nil {
			return nil, backends.SemaphoreConfig{}, fmt.Errorf("backend %q cannot hold semaphores", decl.Backend)
		}
		m, err := adm.ObserveSemaphores(ctx, []string{sem})
		if err != nil {
			return nil, backends.SemaphoreConfig{}, err
		}
		if m[sem] == nil {
			return nil, backends.SemaphoreConfig{}, errors.New("not applied; run coordd apply")
		}
		cl, err := semaphore.New(sb, h)
		return cl, m[sem].Config, err
	}
	rate := func(name string) (*ratelimit.Client, error) {
		decl := s.RateLimits[name]
		if decl == nil {
			return nil, fmt.Errorf("not declared in %s", *path)
		}
		rb, err := open.Open(ctx, s.Backends[decl.Backend], backends.Options{Version: version.Version})
		if err != nil {
			return nil, err
		}
		opened = append(opened, rb)
		return ratelimit.New(rb)
	}
	queueOf := func(name string) (backends.Queues, error) {
		decl := s.Queues[name]
		if decl == nil {
			return nil, fmt.Errorf("not declared in %s", *path)
		}
		qb, err := open.Open(ctx, s.Backends[decl.Backend], backends.Options{Version: version.Version})
		if err != nil {
			return nil, err
		}
		opened = append(opened, qb)
		if qb.Queues() == nil {
			return nil, fmt.Errorf("backend %q cannot hold queues", decl.Backend)
		}
		return qb.Queues(), nil
	}
	sc := scheduler.New(scheduler.Config{Host: h, Semaphore: resolve, RateLimit: rate, Queue: queueOf, ChildEnvUnset: s.ChildEnvUnset})
	code, err := sc.RunManual(ctx, b.Backend, name, env.stdout, env.stderr)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron run: %v\n", err)
		return child.ExitCoorddFailed
	}
	if code == child.ExitNotAcquired {
		// 75 is also a semaphore not acquired: the run recorded says which.
		why := "a run is in progress and overlap is forbid; recorded as skipped"
		if h, err := b.History(ctx, name, 1); err == nil && len(h) > 0 && h[0].Status != backends.RunSkipped && h[0].Error != "" {
			why = esc(h[0].Error) + "; recorded as " + esc(h[0].Status)
		}
		fmt.Fprintf(env.stderr, "coordd cron run: %s: %s\n", name, why)
	}
	return code
}

// cronListJSON is one task in `cron list --json`.
type cronListJSON struct {
	Name     string       `json:"name"`
	Backend  string       `json:"backend"`
	Schedule string       `json:"schedule"`
	After    []string     `json:"after,omitempty"`
	Timezone string       `json:"timezone"`
	Applied  bool         `json:"applied"`
	NextRun  *time.Time   `json:"next_run,omitempty"`
	Running  int          `json:"running"`
	Last     *cronRunJSON `json:"last,omitempty"`
	cronPausedJSON
}

// cronRunJSON is one run in `cron history --json` and `cron list --json`:
// its exit code is null when the command did not run to an end (running,
// skipped, lost), where the store keeps 0 or coordd's own code.
type cronRunJSON struct {
	backends.Run
	ExitCode *int `json:"exit_code"`
	// Output is the tail of the run's stdout and stderr as the store
	// keeps it (at most 64 KiB), as text: invalid UTF-8 replaced.
	Output string `json:"output"`
}

func newCronRunJSON(r backends.Run) cronRunJSON {
	out := cronRunJSON{Run: r, Output: strings.ToValidUTF8(string(r.Output), "\uFFFD")}
	switch r.Status {
	case backends.RunRunning, backends.RunSkipped, backends.RunLost:
	default:
		out.ExitCode = &r.RunResult.ExitCode
	}
	return out
}

// exitText is a run's EXIT column: its code, "-" when it has none,
// "running" while it runs.
func (r cronRunJSON) exitText() string {
	switch {
	case r.Status == backends.RunRunning:
		return "running"
	case r.ExitCode == nil:
		return "-"
	}
	return strconv.Itoa(*r.ExitCode)
}

// cronTimes formats times for cron list and history: in the task's
// timezone, or UTC with --utc.
type cronTimes struct{ utc bool }

func (c cronTimes) format(t time.Time, tz string) string {
	if t.IsZero() {
		return "-"
	}
	loc := time.UTC
	if !c.utc {
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

func cronList(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	utc := fs.Bool("utc", false, "show times in UTC, not in each task's timezone")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	times := cronTimes{utc: *utc}
	if !noPositional(env, "cron list", pos) {
		return 1
	}
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return 1
	}
	names := make([]string, 0, len(s.Cron))
	byBackend := map[string][]string{}
	for n, t := range s.Cron {
		names = append(names, n)
		byBackend[t.Backend] = append(byBackend[t.Backend], n)
	}
	sort.Strings(names)
	rows := map[string]*cronListJSON{}
	for _, n := range names {
		t := s.Cron[n]
		rows[n] = &cronListJSON{Name: n, Backend: t.Backend, Schedule: t.Schedule, After: t.After, Timezone: t.Timezone}
	}
	for bn, ns := range byBackend {
		b, err := openCron(ctx, s, bn, true)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd cron list: %v\n", err)
			return 1
		}
		m, err := b.ObserveCrons(ctx, ns)
		if err != nil {
			b.Close()
			fmt.Fprintf(env.stderr, "coordd cron list: %v\n", err)
			return 1
		}
		for _, n := range ns {
			st := m[n]
			if st == nil {
				continue
			}
			r := rows[n]
			r.Applied, r.Running = true, st.Running
			r.cronPausedJSON = pausedOf(st)
			if !st.NextExec.IsZero() {
				next := st.NextExec.UTC()
				r.NextRun = &next
			}
			h, err := b.History(ctx, n, 1)
			if err != nil {
				b.Close()
				fmt.Fprintf(env.stderr, "coordd cron list: %v\n", err)
				return 1
			}
			if len(h) > 0 {
				last := newCronRunJSON(h[0])
				last.Output = "" // cron history shows it
				r.Last = &last
			}
		}
		b.Close()
	}
	out := make([]*cronListJSON, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	// The NEXT RUN column is painted in every row, its header too, so
	// that it lines up: tabwriter counts the escape codes as width.
	fmt.Fprintf(tw, "TASK\tSCHEDULE\tTIMEZONE\t%s\tLAST RESULT\n", env.paint(colourPlain, "NEXT RUN"))
	for _, r := range out {
		next, last := "not applied (run coordd apply)", "-"
		if r.Applied {
			next = "-"
			if r.NextRun != nil {
				next = times.format(*r.NextRun, r.Timezone)
			}
		}
		if r.Last != nil {
			exit := ""
			if r.Last.ExitCode != nil {
				exit = fmt.Sprintf(" (exit %d)", *r.Last.ExitCode)
			}
			last = fmt.Sprintf("%s%s at %s", env.paint(stateColour(r.Last.Status), esc(r.Last.Status)), exit, times.format(r.Last.StartedAt, r.Timezone))
		}
		if r.Running > 0 {
			last += fmt.Sprintf(", %d running", r.Running)
		}
		next = env.paint(colourPlain, next)
		if r.Paused {
			next = env.paint(stateColour("paused"), r.cell())
		}
		when := r.Schedule
		if len(r.After) > 0 {
			when = "after " + strings.Join(r.After, ", ")
		}
		fmt.Fprintf(tw, "cron.%s\t%s\t%s\t%s\t%s\n", r.Name, when, r.Timezone, next, last)
	}
	tw.Flush()
	for _, r := range out {
		if r.Pause != nil {
			fmt.Fprintf(env.stdout, "cron.%s paused %s\n", r.Name, describePause(r.Pause))
		}
	}
	return 0
}

func cronHistory(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 20, "show at most N runs (0: all kept)")
	utc := fs.Bool("utc", false, "show times in UTC, not in the task's timezone")
	output := fs.Bool("output", false, "print each run's output (the tail the store keeps) after the table")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd cron history: want exactly one task NAME")
		return 1
	}
	name := pos[0]
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return 1
	}
	t := s.Cron[name]
	if t == nil {
		fmt.Fprintf(env.stderr, "coordd cron history: cron task %q is not declared\n", name)
		return 1
	}
	b, err := openCron(ctx, s, t.Backend, true)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron history: %v\n", err)
		return 1
	}
	defer b.Close()
	runs, err := b.History(ctx, name, *limit)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron history: %v\n", err)
		return 1
	}
	out := make([]cronRunJSON, 0, len(runs))
	for _, r := range runs {
		out = append(out, newCronRunJSON(r))
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	times := cronTimes{utc: *utc}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	// STATUS is painted in every row, its header too (see cronList).
	fmt.Fprintf(tw, "SCHEDULED\tATTEMPT\t%s\tEXIT\tHOST\tSTARTED\tFINISHED\tMANUAL\tERROR\n", env.paint(colourPlain, "STATUS"))
	for _, r := range out {
		manual := ""
		if r.Manual {
			manual = "manual"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", times.format(r.ScheduledAt, t.Timezone), r.Attempt, env.paint(stateColour(r.Status), esc(r.Status)), r.exitText(),
			esc(r.Host), times.format(r.StartedAt, t.Timezone), times.format(r.FinishedAt, t.Timezone), manual, esc(r.Error))
	}
	tw.Flush()
	if *output {
		writeRunOutputs(env, out, times, t.Timezone)
	}
	return 0
}

// writeRunOutputs prints each run's output under a line naming the run,
// a line at a time, each escaped as the daemon's log escapes a command's
// output: another host's command wrote it.
func writeRunOutputs(env *cliEnv, runs []cronRunJSON, times cronTimes, tz string) {
	w := env.stdout
	for _, r := range runs {
		fmt.Fprintf(w, "\n--- %s attempt %d, %s, %s ---\n", times.format(r.ScheduledAt, tz), r.Attempt, esc(r.Status), plural(int64(len(r.Run.Output)), "1 byte of output", fmt.Sprintf("%d bytes of output", len(r.Run.Output))))
		if r.Output == "" {
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(r.Output, "\n"), "\n") {
			fmt.Fprintln(w, safetext.Text(line))
		}
	}
}
