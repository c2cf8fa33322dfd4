package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/version"
	"github.com/coordd/coordd/scheduler"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

var cronCmd = &command{
	name:    "cron",
	summary: "run a cron task now; list tasks; show a task's history",
	usage: `Usage:
  coordd cron run NAME [-f PATH] [--host-id ID]
  coordd cron list [-f PATH] [--json]
  coordd cron history NAME [-f PATH] [--limit N] [--json]

cron run runs task NAME now, in this process, as the applied spec defines it
(command, env, workdir, timeout, semaphore, overlap), and records the run in
the task's history as manual. The command gets COORDD_TASK,
COORDD_SCHEDULED_AT, COORDD_ATTEMPT, COORDD_RUN_ID, COORDD_TASK_FENCING_TOKEN
and COORDD_FENCING_TOKEN (with a semaphore: the slot's number, and
COORDD_SEMAPHORE and COORDD_SLOT), and lacks the environment variables that
the spec's backend connection fields reference (unless cluster.child_env is
inherit).

cron list shows each task's schedule, next run and last result; cron history
shows a task's past runs, newest first.

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
		})
	},
}

// cronView is the cron side of one opened backend.
type cronView interface {
	backends.Backend
	backends.Crons
	backends.CronAdmin
}

func openCron(ctx context.Context, s *spec.Spec, backend string, readOnly bool) (cronView, error) {
	cv, _, err := openAs[cronView](ctx, s, backend, "cron tasks", readOnly)
	return cv, err
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
	s, ok := loadSpec(env, *path, false)
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
	resolve := func(sem string) (*semaphore.Client, backends.SemaphoreConfig, error) {
		decl := s.Semaphores[sem]
		if decl == nil {
			return nil, backends.SemaphoreConfig{}, fmt.Errorf("semaphore %q is not declared", sem)
		}
		sb, err := open.Open(ctx, s.Backends[decl.Backend], backends.Options{Version: version.Version})
		if err != nil {
			return nil, backends.SemaphoreConfig{}, err
		}
		opened = append(opened, sb)
		adm, ok := sb.(backends.SemaphoreAdmin)
		if !ok {
			return nil, backends.SemaphoreConfig{}, fmt.Errorf("backend %q cannot hold semaphores", decl.Backend)
		}
		m, err := adm.ObserveSemaphores(ctx, []string{sem})
		if err != nil {
			return nil, backends.SemaphoreConfig{}, err
		}
		if m[sem] == nil {
			return nil, backends.SemaphoreConfig{}, fmt.Errorf("semaphore %q is not applied; run coordd apply", sem)
		}
		cl, err := semaphore.New(sb, h)
		return cl, m[sem].Config, err
	}
	sc := scheduler.New(scheduler.Config{Host: h, Semaphore: resolve, ChildEnvUnset: s.ChildEnvUnset})
	code, err := sc.RunManual(ctx, b, name, env.stdout, env.stderr)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron run: %v\n", err)
		return child.ExitCoorddFailed
	}
	if code == child.ExitNotAcquired {
		fmt.Fprintf(env.stderr, "coordd cron run: %s: a run is in progress and overlap is forbid; recorded as skipped\n", name)
	}
	return code
}

// cronListJSON is one task in `cron list --json`.
type cronListJSON struct {
	Name     string        `json:"name"`
	Backend  string        `json:"backend"`
	Schedule string        `json:"schedule"`
	Timezone string        `json:"timezone"`
	Applied  bool          `json:"applied"`
	NextRun  *time.Time    `json:"next_run,omitempty"`
	Running  int           `json:"running"`
	Last     *backends.Run `json:"last,omitempty"`
}

func cronList(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if !noPositional(env, "cron list", pos) {
		return 1
	}
	s, ok := loadSpec(env, *path, false)
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
		rows[n] = &cronListJSON{Name: n, Backend: t.Backend, Schedule: t.Schedule, Timezone: t.Timezone}
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
				last := h[0]
				last.Output = nil
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
	fmt.Fprintln(tw, "TASK\tSCHEDULE\tTIMEZONE\tNEXT RUN\tLAST RESULT")
	for _, r := range out {
		next, last := "not applied (run coordd apply)", "-"
		if r.Applied {
			next = "-"
			if r.NextRun != nil {
				next = r.NextRun.Format(time.RFC3339)
			}
		}
		if r.Last != nil {
			last = fmt.Sprintf("%s (exit %d) at %s", esc(r.Last.Status), r.Last.ExitCode, r.Last.StartedAt.UTC().Format(time.RFC3339))
		}
		if r.Running > 0 {
			last += fmt.Sprintf(", %d running", r.Running)
		}
		fmt.Fprintf(tw, "cron.%s\t%s\t%s\t%s\t%s\n", r.Name, r.Schedule, r.Timezone, next, last)
	}
	tw.Flush()
	return 0
}

func cronHistory(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 20, "show at most N runs (0: all kept)")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd cron history: want exactly one task NAME")
		return 1
	}
	name := pos[0]
	s, ok := loadSpec(env, *path, false)
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
	if *asJSON {
		if runs == nil {
			runs = []backends.Run{}
		}
		_ = writeJSON(env.stdout, runs)
		return 0
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED\tATTEMPT\tSTATUS\tEXIT\tHOST\tSTARTED\tFINISHED\tMANUAL\tERROR")
	for _, r := range runs {
		fin := "-"
		if !r.FinishedAt.IsZero() {
			fin = r.FinishedAt.UTC().Format(time.RFC3339)
		}
		manual := ""
		if r.Manual {
			manual = "manual"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ScheduledAt.UTC().Format(time.RFC3339), r.Attempt, esc(r.Status), r.ExitCode,
			esc(r.Host), r.StartedAt.UTC().Format(time.RFC3339), fin, manual, esc(r.Error))
	}
	tw.Flush()
	return 0
}
