package main

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/internal/version"
)

var versionCmd = &command{
	name:    "version",
	summary: "print version, commit and Go version",
	usage:   "Usage: coordd version\n\nPrints the version, the commit and the Go version.\n",
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		if _, _, err := parseArgs(fs, args); err != nil {
			return flagExit(err)
		}
		fmt.Fprintln(env.stdout, version.String())
		return 0
	},
}
