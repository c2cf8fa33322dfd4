package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The cron page lists every task with its applied schedule, next run, a
// pause and the last run; a task's page (GET /cron/NAME) adds what runs,
// the occurrences running now and the history of runs, each run's output
// cut to its last outputTail bytes.

// appliedTask decodes the task definition stored at apply: what runs.
func appliedTask(def json.RawMessage) (*spec.CronTask, error) {
	var t spec.CronTask
	if err := json.Unmarshal(def, &t); err != nil {
		return nil, fmt.Errorf("the applied definition is unreadable: %w", err)
	}
	return &t, nil
}

type taskRow struct {
	Name, Backend      string
	Schedule, Timezone string
	Applied            bool
	Differs            bool // the local spec's schedule or zone differs from the applied one
	NextRun            time.Time
	Running            int
	Last               *runRow
	Err                string
	Now                time.Time
	// Pause is an operator's pause (coordd cron pause); PausedInSpec:
	// the applied definition says paused: true.
	Pause        *backends.CronPause
	PausedInSpec bool
}

// Paused reports whether no occurrence of the task starts now: paused by
// an operator or in the spec. Its next run is then not shown.
func (r *taskRow) Paused() bool { return r.Pause != nil || r.PausedInSpec }

// Offers reports whether the row shows action name: Pause only while the
// task runs, Resume only while an operator's pause holds (a pause in the
// spec is lifted by a commit, not from here).
func (r *taskRow) Offers(name string) bool {
	switch name {
	case "pause":
		return !r.Paused()
	case "resume":
		return r.Pause != nil
	}
	return true
}

type runRow struct {
	ScheduledAt time.Time
	Attempt     int
	Status      string
	Exit        string
	Host        string
	StartedAt   time.Time
	FinishedAt  time.Time
	Duration    string
	Lateness    string
	Manual      bool
	Error       string
	RunID       string
	Fencing     int64
	Output      string
	Truncated   bool
	OutputBytes int
	// ShowOutput: the output is shown unfolded (the newest run with output).
	ShowOutput bool
}

// outputTail is how much of a run's output a page shows: its end.
const outputTail = 4 << 10

func newRunRow(r backends.Run, now time.Time) *runRow {
	row := &runRow{ScheduledAt: r.ScheduledAt, Attempt: r.Attempt, Status: r.Status, Host: r.Host, StartedAt: r.StartedAt,
		FinishedAt: r.FinishedAt, Manual: r.Manual, Error: r.Error, RunID: r.RunID, Fencing: r.Fencing, OutputBytes: len(r.Output)}
	switch r.Status {
	case backends.RunSkipped, backends.RunLost:
		row.Exit = "-"
	case backends.RunRunning:
		row.Exit = "running"
	default:
		row.Exit = strconv.Itoa(r.ExitCode)
	}
	switch {
	case r.Status == backends.RunSkipped:
		row.Duration = "-"
	case !r.FinishedAt.IsZero() && !r.StartedAt.IsZero():
		row.Duration = span(r.FinishedAt.Sub(r.StartedAt))
	case r.Status == backends.RunRunning && !r.StartedAt.IsZero():
		row.Duration = span(now.Sub(r.StartedAt)) + " so far"
	default:
		row.Duration = "-"
	}
	// Lateness is that of a scheduled first attempt: a retry waits out its
	// backoff and a manual run is scheduled when it starts.
	row.Lateness = "-"
	if r.Attempt == 1 && !r.Manual && r.Status != backends.RunSkipped && !r.StartedAt.IsZero() {
		row.Lateness = span(max(r.StartedAt.Sub(r.ScheduledAt), 0))
	}
	row.Output, row.Truncated = block(r.Output, outputTail, true)
	return row
}

func (d *Dashboard) cronRows(ctx context.Context, s *spec.Spec, e *reconcile.Engine, names []string) []*taskRow {
	rows := map[string]*taskRow{}
	for _, n := range names {
		t := s.Cron[n]
		rows[n] = &taskRow{Name: n, Backend: t.Backend, Schedule: t.When(), Timezone: t.Timezone}
	}
	order, groups := byBackend(names, func(n string) string { return s.Cron[n].Backend })
	for _, bn := range order {
		readCrons(ctx, bn, e.Backends[bn], groups[bn], rows)
	}
	out := make([]*taskRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out
}

// readCrons fills the rows of names, cron tasks of backend bn, with one
// read of their state and one of each task's last run; a read that fails
// is the row's Err.
func readCrons(ctx context.Context, bn string, b backends.Backend, names []string, rows map[string]*taskRow) {
	var cr backends.Crons
	if b != nil {
		cr = b.Crons()
	}
	var err error
	if cr == nil {
		err = fmt.Errorf("backend %q is not open on this host", bn)
	}
	var now time.Time
	var m map[string]*backends.CronState
	if err == nil {
		now, err = b.Now(ctx)
	}
	if err == nil {
		m, err = cr.ObserveCrons(ctx, names)
	}
	for _, n := range names {
		row := rows[n]
		row.Now = now
		if err != nil {
			row.Err = err.Error()
			continue
		}
		st := m[n]
		if st == nil {
			continue
		}
		row.Applied, row.NextRun, row.Running = true, st.NextExec, st.Running
		row.Pause, row.PausedInSpec = st.Paused, backends.DefPaused(st.Def)
		if def, derr := appliedTask(st.Def); derr == nil {
			row.Differs = def.When() != row.Schedule || def.Timezone != row.Timezone
			row.Schedule, row.Timezone = def.When(), def.Timezone
		}
		h, herr := cr.History(ctx, n, 1)
		if herr != nil {
			row.Err = herr.Error()
			continue
		}
		if len(h) > 0 {
			row.Last = newRunRow(h[0], now)
		}
	}
}

type cronData struct {
	Tasks   []*taskRow
	Actions []Action
}

func (d *Dashboard) cronPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	return &cronData{Tasks: d.cronRows(ctx, s, e, sortedKeys(s.Cron)), Actions: d.offered(p, spec.KindCron, false)}, http.StatusOK
}

type occRow struct {
	ScheduledAt, StartedAt, ExpiresAt time.Time
	Attempt                           int
	Host, RunID                       string
	Fencing                           int64
	Manual                            bool
}

type taskData struct {
	*taskRow
	Def     *spec.CronTask
	Command string
	Running []occRow
	History []*runRow
	Limit   int
	Actions []Action
	// OnFailure is this host's on_failure hook of the task, in one line
	// (its webhook redacted to scheme and host); "" for none.
	OnFailure string
}

// commandShown is how much of a task's command its page shows.
const commandShown = 4 << 10

// historyLimit is how many runs the task page lists by default.
const historyLimit = 50

func (d *Dashboard) taskPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	s, e := d.src.Current()
	if s.Cron[name] == nil {
		return nil, http.StatusNotFound
	}
	p.Title = "cron." + name
	p.Nav = "cron"
	td := &taskData{taskRow: d.cronRows(ctx, s, e, []string{name})[0], Limit: min(atoi(r.URL.Query().Get("limit"), historyLimit), 1000), Actions: d.offered(p, spec.KindCron, false),
		OnFailure: s.Cron[name].OnFailure.Summary()}
	if !td.Applied || td.Err != "" {
		return td, http.StatusOK
	}
	cr := e.Backends[td.Backend].Crons() // open: cronRows read it
	if m, err := cr.ObserveCrons(ctx, []string{name}); err == nil && m[name] != nil {
		if def, err := appliedTask(m[name].Def); err == nil {
			td.Def = def
			cmd := def.Command.Shell
			switch {
			case def.Push != nil:
				cmd = fmt.Sprintf("push to queue %s: payload %q, key %q", def.Push.Queue, def.Push.Payload, def.Push.Key)
			case cmd == "":
				cmd = strings.Join(quoteArgs(def.Command.Argv), " ")
			}
			td.Command, _ = block([]byte(cmd), commandShown, false)
		}
	}
	running, err := cr.Running(ctx, name)
	if err != nil {
		td.Err = err.Error()
		return td, http.StatusOK
	}
	for _, o := range running {
		td.Running = append(td.Running, occRow{ScheduledAt: o.ScheduledAt, StartedAt: o.StartedAt, ExpiresAt: o.ExpiresAt, Attempt: o.Attempt, Host: o.Host, RunID: o.RunID, Fencing: o.Fencing, Manual: o.Manual})
	}
	h, err := cr.History(ctx, name, td.Limit)
	if err != nil {
		td.Err = err.Error()
		return td, http.StatusOK
	}
	shown := false
	for _, run := range h {
		row := newRunRow(run, td.Now)
		row.ShowOutput = !shown && row.Output != ""
		shown = shown || row.ShowOutput
		td.History = append(td.History, row)
	}
	return td, http.StatusOK
}

// quoteArgs shows an argv as a shell would need it typed.
func quoteArgs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}~#") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}
