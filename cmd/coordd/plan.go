package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

var planCmd = &command{
	name:    "plan",
	summary: "show what apply would change",
	usage: `Usage: coordd plan [-f PATH] [--detailed-exitcode] [--json] [--allow-empty] [--allow-destroy-jobs]

Compares the spec with the applied state and the backends, and prints the
changes apply would make: + create, ~ update, -/+ replace, - destroy, and
drift (state changed outside coordd) apart. plan never creates, migrates or
changes anything. A cron task that is created or changed shows when it next
runs, in its timezone. On a terminal the + ~ - marks are coloured (not with
NO_COLOR set; CLICOLOR_FORCE=1 colours a pipe too).

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
		s, ok := loadSpec(ctx, env, *path, false)
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
			writePlanText(env, s, p)
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

// writePlanText prints the plan on stdout as p.WriteText does, with the
// next run of each cron task the plan creates or changes (the question a
// reviewer asks of a schedule) and, on a terminal, the marks coloured.
func writePlanText(env *cliEnv, s *spec.Spec, p *reconcile.Plan) {
	var buf bytes.Buffer
	p.WriteText(&buf)
	next := nextRuns(s, p, time.Now())
	pending := ""
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := planHeader.FindStringSubmatch(line); m != nil {
			pending = next[m[2]]
		}
		if line == "" && pending != "" {
			fmt.Fprintf(env.stdout, "      next run: %s\n", pending)
			pending = ""
		}
		fmt.Fprintln(env.stdout, colourPlanLine(env, line))
	}
}

// planHeader is a change's "  + ADDRESS (backend NAME)" line, and
// planMark the mark of it or of an attribute line.
var (
	planHeader = regexp.MustCompile(`^  (\+|~|-/\+|-|>) (\S+) \(backend `)
	planMark   = regexp.MustCompile(`^(\s+)(-/\+|\+|~|-)( )`)
)

// colourPlanLine colours a line's mark as Terraform does: + green, ~
// yellow, - and -/+ red; an error red.
func colourPlanLine(env *cliEnv, line string) string {
	if !env.colour {
		return line
	}
	if m := planMark.FindStringSubmatchIndex(line); m != nil {
		mark := line[m[4]:m[5]]
		colour := map[string]string{"+": colourGreen, "~": colourYellow, "-": colourRed, "-/+": colourRed}[mark]
		return line[:m[4]] + env.paint(colour, mark) + line[m[5]:]
	}
	for _, p := range []string{"Error:", "      BLOCKED:"} {
		if len(line) >= len(p) && line[:len(p)] == p {
			return env.paint(colourRed, line)
		}
	}
	return line
}

// nextRuns is, by address, the first scheduled time after now of each cron
// task that p creates, updates or replaces, in its timezone (a created
// task with run_on_create also runs at once; its note says so). It is the
// spec's schedule read with this host's clock; apply computes next_exec
// with the backend's.
func nextRuns(s *spec.Spec, p *reconcile.Plan, now time.Time) map[string]string {
	out := map[string]string{}
	for _, c := range p.Changes {
		t := s.Cron[c.Address.Name]
		if c.Address.Kind != spec.KindCron || t == nil || t.Sched == nil {
			continue
		}
		switch c.Action {
		case reconcile.Create, reconcile.Update, reconcile.Replace:
		default:
			continue
		}
		loc, err := time.LoadLocation(t.Timezone)
		if err != nil {
			loc = time.UTC
		}
		n := t.Sched.Next(now.In(loc))
		if n.IsZero() {
			continue
		}
		out[c.Address.String()] = fmt.Sprintf("%s (%s)", n.In(loc).Format("2006-01-02 15:04:05 MST"), t.Timezone)
	}
	return out
}
