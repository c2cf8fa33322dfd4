package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/safetext"
	"github.com/coordd/coordd/spec"
)

// cronPauseJSON is what `cron pause --json` and `cron resume --json` print.
type cronPauseJSON struct {
	Task string `json:"task"`
	// Paused: the task is paused after the command (by an operator, or by
	// paused: true in its applied definition).
	Paused bool `json:"paused"`
	// Pause is the operator's pause: the one in force after pause, the
	// one removed by resume (absent: none).
	Pause *backends.CronPause `json:"pause,omitempty"`
	// Changed: this command wrote the pause (pause) or removed one
	// (resume).
	Changed bool `json:"changed"`
	// PausedInSpec: the applied definition says paused: true, which only
	// git and coordd apply change.
	PausedInSpec bool `json:"paused_in_spec"`
}

// openPauser opens the backend of task name (declared in the local spec)
// with its cron views.
func openPauser(ctx context.Context, env *cliEnv, what, path, name string) (cronView, backends.Crons, *spec.Spec, bool) {
	s, ok := loadSpec(ctx, env, path, false)
	if !ok {
		return cronView{}, nil, nil, false
	}
	t := s.Cron[name]
	if t == nil {
		fmt.Fprintf(env.stderr, "coordd %s: cron task %q is not declared in %s\n", what, name, path)
		return cronView{}, nil, nil, false
	}
	b, err := openCron(ctx, s, t.Backend, false)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd %s: %v\n", what, err)
		return cronView{}, nil, nil, false
	}
	return b, b.Crons, s, true
}

// pauseFailed prints why a pause or a resume of task name on b failed and
// returns the exit code.
func pauseFailed(env *cliEnv, what string, b backends.Backend, name string, err error) int {
	if errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrNoSchema) {
		fmt.Fprintf(env.stderr, "coordd %s: cron task %q is not applied on backend %q; run coordd apply\n", what, name, b.Name())
	} else {
		fmt.Fprintf(env.stderr, "coordd %s: %v\n", what, err)
	}
	return 1
}

// pauseArgs are the arguments of cron pause and queue pause.
type pauseArgs struct {
	path, name, host, reason string
	json                     bool
}

// parsePauseArgs reads `coordd WHAT NAME --reason TEXT [--host-id ID]
// [--json]` (what: "cron pause" or "queue pause", naming a kind's object);
// nil and the exit code when they are wrong.
func parsePauseArgs(c *command, env *cliEnv, args []string, what, kind string) (*pauseArgs, int) {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	reason := fs.String("reason", "", "why the "+kind+" is paused, shown to everyone (required)")
	host := fs.String("host-id", "", "host id recorded with the pause (default: the hostname)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return nil, flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintf(env.stderr, "coordd %s: want exactly one %s NAME\n", what, kind)
		return nil, 1
	}
	if *reason == "" {
		fmt.Fprintf(env.stderr, "coordd %s: --reason is required: say why, for whoever finds the %s paused\n", what, kind)
		return nil, 1
	}
	h, err := hostID(env, *host)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd %s: %v\n", what, err)
		return nil, 1
	}
	return &pauseArgs{path: *path, name: pos[0], host: h, reason: *reason, json: *asJSON}, 0
}

// describePause is one pause as a sentence's end: by whom, when, why.
// Host and reason were written by another host: they go through esc.
func describePause(p *backends.CronPause) string {
	return fmt.Sprintf("by %s at %s: %s", esc(p.Host), p.At.UTC().Format(time.RFC3339), esc(p.Reason))
}

func cronPause(ctx context.Context, c *command, env *cliEnv, args []string) int {
	a, code := parsePauseArgs(c, env, args, "cron pause", "task")
	if a == nil {
		return code
	}
	name, h := a.name, a.host
	b, pz, _, ok := openPauser(ctx, env, "cron pause", a.path, name)
	if !ok {
		return 1
	}
	defer b.Close()
	p, changed, err := pz.PauseCron(ctx, name, h, a.reason)
	if err != nil {
		return pauseFailed(env, "cron pause", b.Backend, name, err)
	}
	m, err := b.ObserveCrons(ctx, []string{name})
	inSpec := err == nil && m[name] != nil && backends.DefPaused(m[name].Def)
	if a.json {
		_ = writeJSON(env.stdout, cronPauseJSON{Task: name, Paused: true, Pause: &p, Changed: changed, PausedInSpec: inSpec})
		return 0
	}
	if changed {
		fmt.Fprintf(env.stdout, "cron.%s paused %s\n", name, describePause(&p))
		fmt.Fprintf(env.stdout, "No occurrence starts until `coordd cron resume %s`; a run in progress finishes.\n", name)
	} else {
		fmt.Fprintf(env.stdout, "cron.%s was already paused %s; that pause is kept\n", name, describePause(&p))
	}
	return 0
}

func cronResume(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd cron resume: want exactly one task NAME")
		return 1
	}
	name := pos[0]
	b, pz, s, ok := openPauser(ctx, env, "cron resume", *path, name)
	if !ok {
		return 1
	}
	defer b.Close()
	prev, err := pz.ResumeCron(ctx, name)
	if err != nil {
		return pauseFailed(env, "cron resume", b.Backend, name, err)
	}
	m, err := b.ObserveCrons(ctx, []string{name})
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd cron resume: %v\n", err)
		return 1
	}
	st := m[name]
	inSpec := st != nil && backends.DefPaused(st.Def)
	code := 0
	if inSpec {
		code = 1 // the task is still paused: what the operator asked for did not happen
	}
	if *asJSON {
		_ = writeJSON(env.stdout, cronPauseJSON{Task: name, Paused: inSpec, Pause: prev, Changed: prev != nil, PausedInSpec: inSpec})
		return code
	}
	if prev != nil {
		fmt.Fprintf(env.stdout, "cron.%s: removed the pause %s\n", name, describePause(prev))
	}
	if inSpec {
		where := "the spec"
		if t := s.Cron[name]; t != nil && t.Paused && t.Pos.File != "" {
			where = fmt.Sprintf("%s:%d", safetext.Line(t.Pos.File), t.Pos.Line)
		}
		fmt.Fprintf(env.stderr, "coordd cron resume: cron.%s stays paused: git says so (paused: true in its applied definition, declared at %s); remove paused: true and run coordd apply to resume it\n", name, where)
		return code
	}
	if prev == nil {
		fmt.Fprintf(env.stdout, "cron.%s is not paused; nothing to resume\n", name)
		return 0
	}
	catchUp := spec.CatchUpOnce
	var def spec.CronTask
	if st != nil && json.Unmarshal(st.Def, &def) == nil && def.CatchUp != "" {
		catchUp = def.CatchUp
	}
	fmt.Fprintf(env.stdout, "Times missed while paused follow catch_up %s, as after a downtime; the leader notices within its poll (20 s at most).\n", catchUp)
	return 0
}

// cronPausedJSON is the pause of a task as cron list and status show it.
type cronPausedJSON struct {
	// Paused: no occurrence is started, by an operator's pause or by
	// paused: true in the applied definition.
	Paused bool `json:"paused"`
	// Pause is the operator's pause (coordd cron pause), absent when none.
	Pause *backends.CronPause `json:"pause,omitempty"`
	// PausedInSpec: the applied definition says paused: true.
	PausedInSpec bool `json:"paused_in_spec,omitempty"`
}

func pausedOf(st *backends.CronState) cronPausedJSON {
	return cronPausedJSON{Paused: st.IsPaused(), Pause: st.Paused, PausedInSpec: backends.DefPaused(st.Def)}
}

// cell is the short form, for a table cell: who paused the task.
func (p cronPausedJSON) cell() string {
	switch {
	case p.Pause != nil && p.PausedInSpec:
		return "paused (by " + esc(p.Pause.Host) + ", and in the spec)"
	case p.Pause != nil:
		return "paused (by " + esc(p.Pause.Host) + ")"
	case p.PausedInSpec:
		return "paused (in the spec)"
	}
	return ""
}
