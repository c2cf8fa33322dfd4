package main

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/reconcile"
)

var planCmd = &command{
	name:    "plan",
	summary: "show what apply would change",
	usage: `Usage: coordd plan [-f PATH] [--detailed-exitcode] [--json] [--allow-empty] [--allow-destroy-jobs]

Compares the spec with the applied state and the backends, and prints the
changes apply would make: + create, ~ update, -/+ replace, - destroy, and
drift (state changed outside coordd) apart. plan never creates, migrates or
changes anything.

Warnings about the spec (advice, such as a semaphore without max_hold) are
printed on stderr as Warning: FILE:LINE:COL: ADDRESS: what, and listed under
"warnings" with --json; they do not change the exit status.

Exit status: 0 success, 1 error. With --detailed-exitcode: 0 no changes,
1 error, 2 changes present.
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		path := specFlag(fs, env)
		detailed := fs.Bool("detailed-exitcode", false, "exit 2 when there are changes, 0 when none")
		asJSON := fs.Bool("json", false, "print the plan as JSON")
		var opts reconcile.Options
		fs.BoolVar(&opts.AllowEmpty, "allow-empty", false, "plan as apply --allow-empty would")
		fs.BoolVar(&opts.AllowDestroyJobs, "allow-destroy-jobs", false, "plan as apply --allow-destroy-jobs would")
		pos, _, err := parseArgs(fs, args)
		if err != nil {
			return flagExit(err)
		}
		if !noPositional(env, c.name, pos) {
			return 1
		}
		s, ok := loadSpec(env, *path, false)
		if !ok {
			return 1
		}
		e, ok := openEngine(ctx, env, s, true)
		if !ok {
			return 1
		}
		defer e.Close()
		p, err := e.Plan(ctx, opts)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd: plan: %v\n", err)
			return 1
		}
		printWarnings(env, p.Warnings)
		if *asJSON {
			if err := p.WriteJSON(env.stdout); err != nil {
				fmt.Fprintf(env.stderr, "coordd: %v\n", err)
				return 1
			}
		} else {
			p.WriteText(env.stdout)
		}
		switch {
		case len(p.Blocked) > 0:
			return 1
		case *detailed && p.HasChanges():
			return 2
		}
		return 0
	},
}
