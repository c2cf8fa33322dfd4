package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// queuePauseJSON is what `queue pause --json` and `queue resume --json`
// print.
type queuePauseJSON struct {
	Queue string `json:"queue"`
	// Paused: the queue is paused after the command.
	Paused bool `json:"paused"`
	// Pause is the pause in force after pause, the one removed by resume
	// (absent: none).
	Pause *backends.Pause `json:"pause,omitempty"`
	// Changed: this command wrote the pause (pause) or removed one
	// (resume).
	Changed bool `json:"changed"`
}

// queuePauseFailed prints why a pause or a resume of queue name failed
// and returns the exit code.
func queuePauseFailed(env *cliEnv, what, backend, name string, err error) int {
	if errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrNoSchema) {
		fmt.Fprintf(env.stderr, "coordd %s: queue %q is not applied on backend %q; run coordd apply\n", what, name, backend)
	} else {
		fmt.Fprintf(env.stderr, "coordd %s: %v\n", what, err)
	}
	return 1
}

func queuePause(ctx context.Context, c *command, env *cliEnv, args []string) int {
	a, code := parsePauseArgs(c, env, args, "queue pause", "queue")
	if a == nil {
		return code
	}
	name, h := a.name, a.host
	t, err := openQueue(ctx, env, a.path, name, false)
	if err != nil {
		reportErr(env, "coordd queue pause", err)
		return 1
	}
	defer t.backend.Close()
	p, changed, err := t.backend.Queues().PauseQueue(ctx, name, h, a.reason)
	if err != nil {
		return queuePauseFailed(env, "queue pause", t.local.Backend, name, err)
	}
	if a.json {
		_ = writeJSON(env.stdout, queuePauseJSON{Queue: name, Paused: true, Pause: &p, Changed: changed})
		return 0
	}
	if changed {
		fmt.Fprintf(env.stdout, "queue.%s paused %s\n", name, describePause(&p))
		fmt.Fprintf(env.stdout, "Workers claim nothing from it (within a second) until `coordd queue resume %s`; jobs in flight finish, and pushes are still taken.\n", name)
	} else {
		fmt.Fprintf(env.stdout, "queue.%s was already paused %s; that pause is kept\n", name, describePause(&p))
	}
	return 0
}

func queueResume(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd queue resume: want exactly one queue NAME")
		return 1
	}
	name := pos[0]
	t, err := openQueue(ctx, env, *path, name, false)
	if err != nil {
		reportErr(env, "coordd queue resume", err)
		return 1
	}
	defer t.backend.Close()
	prev, err := t.backend.Queues().ResumeQueue(ctx, name)
	if err != nil {
		return queuePauseFailed(env, "queue resume", t.local.Backend, name, err)
	}
	if *asJSON {
		_ = writeJSON(env.stdout, queuePauseJSON{Queue: name, Pause: prev, Changed: prev != nil})
		return 0
	}
	if prev == nil {
		fmt.Fprintf(env.stdout, "queue.%s is not paused; nothing to resume\n", name)
		return 0
	}
	fmt.Fprintf(env.stdout, "queue.%s: removed the pause %s; workers claim again within a second\n", name, describePause(prev))
	return 0
}
