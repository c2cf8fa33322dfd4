package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/coordd/coordd/reconcile"
)

var applyCmd = &command{
	name:    "apply",
	summary: "show the plan and apply it",
	usage: `Usage: coordd apply [-f PATH] [--auto-approve] [--allow-empty] [--allow-destroy-jobs]

Shows the plan and, once approved, applies it. On a terminal it asks; with
neither a terminal nor --auto-approve it refuses. Apply takes the apply lock
in the cluster backend and plans again under it; if that plan differs from the
one shown, it stops without changing anything.

Safety: a spec with no objects while objects are applied is refused unless
--allow-empty; deleting or replacing a queue that still holds jobs is refused
unless --allow-destroy-jobs; prevent_destroy: true blocks deletion.

Exit status: 0 applied (or nothing to do), 1 error or refused.
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		path := specFlag(fs, env)
		auto := fs.Bool("auto-approve", false, "apply without asking")
		var opts reconcile.Options
		fs.BoolVar(&opts.AllowEmpty, "allow-empty", false, "let an empty spec delete every applied object")
		fs.BoolVar(&opts.AllowDestroyJobs, "allow-destroy-jobs", false, "let a delete or replace drop a queue's jobs")
		pos, _, err := parseArgs(fs, args)
		if err != nil {
			return flagExit(err)
		}
		if !noPositional(env, c.name, pos) {
			return 1
		}
		if !*auto && !env.isTerminal {
			fmt.Fprintln(env.stderr, "coordd apply: no terminal to ask for approval; pass --auto-approve to apply non-interactively")
			return 1
		}
		s, ok := loadSpec(ctx, env, *path, false)
		if !ok {
			return 1
		}
		e, ok := openEngine(ctx, env, s, false)
		if !ok {
			return 1
		}
		defer e.Close()

		approved := ""
		if !*auto {
			p, err := e.Plan(ctx, opts)
			if err != nil {
				fmt.Fprintf(env.stderr, "coordd: plan: %v\n", err)
				return 1
			}
			writePlanText(env, s, p)
			if len(p.Blocked) > 0 {
				return 1
			}
			if !p.HasChanges() {
				return 0
			}
			fmt.Fprint(env.stdout, "\nDo you want to perform these actions?\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ")
			line, _ := bufio.NewReader(env.stdin).ReadString('\n')
			if strings.TrimSpace(line) != "yes" {
				fmt.Fprintln(env.stdout, "\nApply cancelled.")
				return 1
			}
			approved = p.Fingerprint()
		}

		res, err := e.Apply(ctx, opts, approved)
		if *auto && res != nil {
			writePlanText(env, s, res.Plan)
		}
		if err != nil {
			if errors.Is(err, reconcile.ErrPlanChanged) && res != nil {
				fmt.Fprintln(env.stderr, "\ncoordd apply: the state changed while you reviewed the plan; nothing was applied. The new plan:")
				res.Plan.WriteText(env.stderr)
				return 1
			}
			if errors.Is(err, reconcile.ErrBlocked) {
				fmt.Fprintln(env.stderr, "coordd apply: refused; nothing was applied")
				return 1
			}
			fmt.Fprintf(env.stderr, "coordd apply: %v\n", err)
			return 1
		}
		if res.Plan.HasChanges() {
			fmt.Fprintf(env.stdout, "\nApply complete! Resources: %d added, %d changed, %d destroyed. (generation %d)\n",
				res.Plan.Summary.Add, res.Plan.Summary.Change, res.Plan.Summary.Destroy, res.Generation)
		}
		return 0
	},
}
