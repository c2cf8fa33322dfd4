package main

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/spec"
)

var validateCmd = &command{
	name:    "validate",
	summary: "load and check a spec without connecting to any backend",
	usage: `Usage: coordd validate [-f PATH] [--skip-env]

Loads the spec and checks it: syntax, field types, references and backend
capabilities. Every error is printed on stderr as FILE:LINE:COL: ADDRESS: what
is wrong; after the first 50, one line counts the rest. Only regular files
(or symlinks to them) are read, of at most 8 MiB each and 16 MiB together,
outside /proc and /sys, within 10s (a file system that does not answer is
an error; TERM and INT stop the read at once). Secret files (${file:PATH},
${credential:NAME}) are read by the same rules. validate never connects to
a backend. Warnings (advice, such as a semaphore
without max_hold) are printed on stderr as Warning: FILE:LINE:COL: ADDRESS:
what; they do not change the exit status.

Exit status: 0 valid, 1 invalid.
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		path := specFlag(fs, env)
		skipEnv := fs.Bool("skip-env", false, "don't expand ${VAR} or read secret files in backend fields (for CI without production secrets)")
		pos, _, err := parseArgs(fs, args)
		if err != nil {
			return flagExit(err)
		}
		if !noPositional(env, c.name, pos) {
			return 1
		}
		s, ok := loadSpec(ctx, env, *path, *skipEnv)
		if !ok {
			return 1
		}
		fmt.Fprintf(env.stdout, "The spec is valid: %d object(s) in %d file(s).\n", s.ObjectCount(), len(s.Files))
		printWarnings(env, s.Warnings())
		return 0
	},
}

// printWarnings prints the spec's warnings on stderr, one a line.
func printWarnings(env *cliEnv, ws []spec.Warning) {
	for _, w := range ws {
		fmt.Fprintf(env.stderr, "Warning: %s\n", w)
	}
}
