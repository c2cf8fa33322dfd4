package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/ratelimit"
	"github.com/coordd/coordd/spec"
)

var rateCmd = &command{
	name:    "rate",
	summary: "run a command once a rate limit grants a permit",
	usage: `Usage:
  coordd rate run NAME [--key KEY] [-f PATH] [--wait DURATION | --no-wait] -- CMD ARGS...

rate run takes one permit of rate limit NAME and runs CMD. Permits are
counted across every host and process that uses the limit, by the backend's
clock: over any window, at most rate × window + burst commands start, and
an idle limit grants its burst at once. Without --wait or --no-wait it
waits as long as it takes; it asks the backend again when the next permit
is due, never sooner, and gives up at once when that is after --wait.

A rate limit declared with keyed: true takes --key: each key has a limit of
its own with the declared rate and burst (per user id, per partner). The
child runs in its own process group, gets INT, TERM, HUP and QUIT
forwarded, has COORDD_RATE_LIMIT (and COORDD_RATE_LIMIT_KEY) set, and lacks
the environment variables that the spec's backend connection fields
reference (unless cluster.child_env is inherit). The permit is spent when
it is granted: a command that fails does not give it back.

Exit status of rate run:
  the child's code, or 128+N when signal N killed it
  75   no permit granted (--no-wait, or the next permit is due after --wait)
  125  coordd failed before the start (spec, a rate limit never applied,
       backend)
  126  command not executable; 127 command not found
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		return dispatch(ctx, c, env, args, map[string]runFunc{
			"run": rateRun,
		})
	},
}

func rateRun(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	wait := fs.Duration("wait", 0, "give up when no permit is due within this long (exit 75)")
	noWait := fs.Bool("no-wait", false, "give up at once when no permit is due now (exit 75)")
	key := fs.String("key", "", "the key of a keyed rate limit")
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return child.ExitCoorddFailed
	}
	const prefix = "coordd rate run"
	if len(pos) == 0 {
		fmt.Fprintln(env.stderr, prefix+": missing rate limit NAME")
		return child.ExitCoorddFailed
	}
	name, argv := pos[0], append(pos[1:], rest...)
	if len(argv) == 0 {
		fmt.Fprintln(env.stderr, prefix+": missing command after --")
		return child.ExitCoorddFailed
	}
	if *noWait && *wait > 0 {
		fmt.Fprintln(env.stderr, prefix+": --wait and --no-wait exclude each other")
		return child.ExitCoorddFailed
	}
	if err := spec.CheckKey(*key); err != nil {
		fmt.Fprintf(env.stderr, "%s: --key: %v\n", prefix, err)
		return child.ExitCoorddFailed
	}
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return child.ExitCoorddFailed
	}
	local := s.RateLimits[name]
	switch {
	case local == nil:
		fmt.Fprintf(env.stderr, "%s: rate limit %q is not declared in %s\n", prefix, name, *path)
		return child.ExitCoorddFailed
	case local.Keyed && *key == "":
		fmt.Fprintf(env.stderr, "%s: rate limit %q is keyed: give the key with --key\n", prefix, name)
		return child.ExitCoorddFailed
	case !local.Keyed && *key != "":
		fmt.Fprintf(env.stderr, "%s: rate limit %q is not keyed: --key applies to one declared with keyed: true\n", prefix, name)
		return child.ExitCoorddFailed
	}
	_, b, err := openAs(ctx, s, local.Backend, "rate limits", false, backends.RateLimitsOf)
	if err != nil {
		reportErr(env, prefix, err)
		return child.ExitCoorddFailed
	}
	defer b.Close()
	cl, err := ratelimit.New(b)
	if err != nil {
		reportErr(env, prefix, err)
		return child.ExitCoorddFailed
	}

	// Signals that come while waiting end the wait; later ones go to the
	// child.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	var waitSig os.Signal
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case sg := <-sigs:
			waitSig = sg
			cancelWait()
		case <-stopWatch:
		}
	}()
	if *noWait {
		_, err = cl.Allow(waitCtx, name, *key)
	} else {
		_, err = cl.Wait(waitCtx, name, *key, *wait)
	}
	close(stopWatch)
	<-watchDone
	label := name
	if *key != "" {
		label += " key " + esc(*key)
	}
	switch {
	case waitSig != nil:
		fmt.Fprintf(env.stderr, "%s: %s: interrupted while waiting (%v)\n", prefix, label, waitSig)
		return 128 + int(waitSig.(syscall.Signal))
	case errors.Is(err, ratelimit.ErrNotGranted):
		fmt.Fprintf(env.stderr, "%s: %s: %v\n", prefix, label, err)
		return child.ExitNotAcquired
	case errors.Is(err, backends.ErrNotFound):
		fmt.Fprintf(env.stderr, "%s: rate limit %q is not applied on backend %q; run coordd apply\n", prefix, name, local.Backend)
		return child.ExitCoorddFailed
	case err != nil:
		reportErr(env, prefix+": "+label, err)
		return child.ExitCoorddFailed
	}

	vars := []string{child.VarRateLimit + "=" + name}
	if *key != "" {
		vars = append(vars, child.VarRateLimitKey+"="+*key)
	}
	p, err := child.Start(ctx, child.Spec{
		Argv:  argv,
		Stdin: env.stdin, Stdout: env.stdout, Stderr: env.stderr,
		Env:   vars,
		Shim:  selfExe(),
		Unset: s.ChildEnvUnset(),
	})
	if err != nil {
		fmt.Fprintf(env.stderr, "%s: %v\n", prefix, err)
		return child.ExitCode(child.Result{StartErr: err})
	}
	for {
		select {
		case sg := <-sigs:
			_ = p.Signal(sg.(syscall.Signal))
		case <-p.Done():
			return child.ExitCode(p.Wait())
		}
	}
}
