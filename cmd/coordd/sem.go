package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/retry"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

var semCmd = &command{
	name:    "sem",
	summary: "run a command holding a semaphore slot; show holders",
	usage: `Usage:
  coordd sem run NAME [--key KEY] [-f PATH] [--wait DURATION | --no-wait] [--host-id ID] -- CMD ARGS...
  coordd sem status [NAME] [--key KEY] [-f PATH] [--json]

sem run takes a slot of semaphore NAME, runs CMD while renewing the lease, and
releases the slot when CMD exits. Without --wait or --no-wait it waits as long
as it takes, as flock(1) does; with stderr on a terminal, a wait says what
it waits for (the holders, with host and pid, and how many wait). Waiters are served in the order they came
(memcached excepted), and --no-wait never takes a slot a waiter is owed. The child runs in its own process group, gets
INT, TERM, HUP and QUIT forwarded, and has COORDD_SEMAPHORE, COORDD_SLOT and
COORDD_FENCING_TOKEN set, and lacks the environment variables that the spec's
backend connection fields reference (unless cluster.child_env is inherit). It
never outlives the lease: if renewals stop, it gets TERM and then KILL before
the lease ends. A release that fails is retried for a few seconds.

A semaphore declared with keyed: true takes --key: each key is an instance
of its own with the semaphore's limit and max_waiting (one runs, one waits,
the rest are dropped, per user id or per file), and the child gets
COORDD_SEMAPHORE_KEY too. sem status lists a keyed semaphore's live
instances, or with --key the one instance.

A backend that lost its data (a Redis or memcached restarted empty), or a
Redis that restarted or failed over, holds its semaphores for their longest
lease: sem run waits for that too, saying so on a terminal, or with
--no-wait exits 75. A waiting sem run also rides out a backend it cannot
reach for a moment (a restart, a failover): at the start for up to --wait
(30s without it), and while it waits for as long as the wait.

Exit status of sem run:
  the child's code, or 128+N when signal N killed it
  75   not acquired (--no-wait, --wait elapsed, max_waiting full, a
       data-loss hold)
  122  the slot was lost while the child ran
  125  coordd failed before the start (spec, a semaphore never applied,
       backend)
  126  command not executable; 127 command not found
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		return dispatch(ctx, c, env, args, map[string]runFunc{
			"run":    semRun,
			"status": semStatus,
		})
	},
}

// semTarget is one semaphore resolved from the local spec, with its backend
// opened.
type semTarget struct {
	name string
	// key is the instance's key when the semaphore is keyed.
	key     string
	local   *spec.Semaphore
	backend backends.Backend
	applied backends.SemaphoreConfig
	// unset: the variables the command must not inherit.
	unset []string
}

// openSem loads the spec, finds name, checks key against it (a keyed
// semaphore needs one, another takes none) and opens its backend. The
// runtime enforces the applied config, not the local file, so two hosts with
// different checkouts still share one limit; a difference is reported.
func openSem(ctx context.Context, env *cliEnv, path, name, key string) (*semTarget, error) {
	s, ok := loadSpec(ctx, env, path, false)
	if !ok {
		return nil, errReported
	}
	local := s.Semaphores[name]
	if local == nil {
		return nil, fmt.Errorf("semaphore %q is not declared in %s", name, path)
	}
	switch {
	case local.Keyed && key == "":
		return nil, explain(backends.ErrKeyRequired, "semaphore %q is keyed: give the instance's key with --key", name)
	case !local.Keyed && key != "":
		return nil, explain(backends.ErrNotKeyed, "semaphore %q is not keyed: --key applies to one declared with keyed: true", name)
	}
	adm, b, err := openAs(ctx, s, local.Backend, "semaphores", false, backends.Backend.Semaphores)
	if err != nil {
		return nil, err
	}
	m, err := adm.ObserveSemaphores(ctx, []string{name})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("read semaphore %q: %w", name, err)
	}
	st := m[name]
	if st == nil {
		back, err := lossExplainsMissing(ctx, s, local.Backend, b)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd: warning: semaphore %q is missing, and reading the data-loss marker of backend %q failed: %v\n", name, local.Backend, err)
		}
		if !back {
			b.Close()
			return nil, fmt.Errorf("semaphore %q is not applied on backend %q; run coordd apply", name, local.Backend)
		}
		// Held after a data loss: the local declaration stands in for the
		// applied one, which comes back with the semaphore.
		cfg := backends.SemaphoreConfig{Limit: local.Limit, Lease: local.Lease, MaxHold: local.MaxHold}
		return &semTarget{name: name, key: key, local: local, backend: b, applied: cfg, unset: s.ChildEnvUnset()}, nil
	}
	if st.Config.Limit != local.Limit || st.Config.Lease != local.Lease || st.Config.MaxHold != local.MaxHold {
		fmt.Fprintf(env.stderr, "coordd: warning: semaphore %q: the local spec (limit %d, lease %s, max_hold %s) differs from the applied one (limit %d, lease %s, max_hold %s); the applied one is enforced\n",
			name, local.Limit, local.Lease, local.MaxHold, st.Config.Limit, st.Config.Lease, st.Config.MaxHold)
	}
	return &semTarget{name: name, key: key, local: local, backend: b, applied: st.Config, unset: s.ChildEnvUnset()}, nil
}

// openRideOut bounds how long a waiting sem run without --wait keeps
// trying to reach a backend it cannot reach when it starts: long enough
// for a restart or a failover, short enough that a wrong address fails.
const openRideOut = 30 * time.Second

// openSemRiding is openSem that, unless noWait, rides out a backend it
// cannot reach (semaphore.Unreachable: a restart, a failover), trying
// again with pauses up to 2 s, for the wait or openRideOut, until waitCtx
// ends (a signal). On a terminal it says so once.
func openSemRiding(ctx, waitCtx context.Context, env *cliEnv, path, name, key string, noWait bool, wait time.Duration) (*semTarget, error) {
	limit := openRideOut
	if wait > 0 {
		limit = wait
	}
	start := time.Now()
	for pause, told := 100*time.Millisecond, false; ; pause = min(pause*2, 2*time.Second) {
		t, err := openSem(ctx, env, path, name, key)
		if err == nil || noWait || !semaphore.Unreachable(err) || time.Since(start)+pause > limit {
			return t, err
		}
		if !told && env.stderrTerminal {
			told = true
			fmt.Fprintf(env.stderr, "coordd sem run: cannot reach the backend of semaphore %s, trying again for up to %v: %v\n", name, limit, err)
		}
		select {
		case <-time.After(pause):
		case <-waitCtx.Done():
			return nil, err
		}
	}
}

// lossExplainsMissing reports whether semaphore backend b, which lacks a
// semaphore the spec declares, lost its data and holds its semaphores (see
// reconcile.Engine.LossExplainsMissing). It records a loss it finds, as the
// daemon's leader would a moment later, reading the applied inventory on
// the cluster backend to tell a loss from a first use.
func lossExplainsMissing(ctx context.Context, s *spec.Spec, backend string, b backends.Backend) (bool, error) {
	if _, ok := b.(backends.LossGuard); !ok {
		return false, nil
	}
	e := &reconcile.Engine{Spec: s, Backends: map[string]backends.Backend{backend: b}}
	if s.Cluster.Backend == backend {
		e.State = b.Cluster()
	} else {
		st, cb, err := openAs(ctx, s, s.Cluster.Backend, "applied state", true, backends.Backend.Cluster)
		if err != nil {
			return false, err
		}
		defer cb.Close()
		e.State = st
	}
	if e.State == nil {
		return false, fmt.Errorf("cluster backend %q cannot hold applied state: %w", s.Cluster.Backend, backends.ErrUnsupported)
	}
	return e.LossExplainsMissing(ctx, backend)
}

// hostID is --host-id, or the hostname when the flag is empty. Either must
// be a valid host id (spec.CheckHostID): it is stored in every backend and
// printed by status. A hostname that is not one is an error that says to
// pass --host-id, never a silent substitute.
func hostID(env *cliEnv, flagVal string) (string, error) {
	if flagVal != "" {
		if err := spec.CheckHostID(flagVal); err != nil {
			return "", fmt.Errorf("--host-id: %w", err)
		}
		return flagVal, nil
	}
	hostname := env.hostname
	if hostname == nil {
		hostname = os.Hostname
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("cannot read the hostname for the default host id (%v); pass --host-id", err)
	}
	if err := spec.CheckHostID(h); err != nil {
		return "", fmt.Errorf("the hostname cannot serve as the host id: %w; pass --host-id", err)
	}
	return h, nil
}

// forwarded are the signals sem run passes to the child's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func semRun(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	wait := fs.Duration("wait", 0, "give up after waiting this long (exit 75)")
	noWait := fs.Bool("no-wait", false, "give up at once when no slot is free (exit 75)")
	host := fs.String("host-id", "", "host id recorded with the holder (default: the hostname)")
	key := fs.String("key", "", "the instance of a keyed semaphore to hold")
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return child.ExitCoorddFailed
	}
	if len(pos) == 0 {
		fmt.Fprintln(env.stderr, "coordd sem run: missing semaphore NAME")
		return child.ExitCoorddFailed
	}
	name, argv := pos[0], append(pos[1:], rest...)
	if len(argv) == 0 {
		fmt.Fprintln(env.stderr, "coordd sem run: missing command after --")
		return child.ExitCoorddFailed
	}
	if *noWait && *wait > 0 {
		fmt.Fprintln(env.stderr, "coordd sem run: --wait and --no-wait exclude each other")
		return child.ExitCoorddFailed
	}
	hid, err := hostID(env, *host)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd sem run: %v\n", err)
		return child.ExitCoorddFailed
	}
	if *key != "" {
		if err := backends.CheckInstanceKey(*key); err != nil {
			fmt.Fprintf(env.stderr, "coordd sem run: --key: %v\n", err)
			return child.ExitCoorddFailed
		}
	}

	// Signal handlers go in before waiting starts, so a signal while
	// waiting ends the wait cleanly instead of killing us with a slot taken.
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
		case s := <-sigs:
			waitSig = s
			cancelWait()
		case <-stopWatch:
		}
	}()

	started := time.Now()
	t, err := openSemRiding(ctx, waitCtx, env, *path, name, *key, *noWait, *wait)
	if err != nil {
		close(stopWatch)
		<-watchDone
		if waitSig != nil {
			fmt.Fprintf(env.stderr, "coordd sem run: %s: interrupted while waiting (%v)\n", name, waitSig)
			return 128 + int(waitSig.(syscall.Signal))
		}
		if *noWait && semaphore.Unreachable(err) {
			// As when the acquire itself cannot reach it (acquireFailed):
			// a temporary failure, 75.
			fmt.Fprintf(env.stderr, "coordd sem run: %s: not acquired: its backend could not be reached (--no-wait): %v\n", name, err)
			return child.ExitNotAcquired
		}
		reportErr(env, "coordd sem run", err)
		return child.ExitCoorddFailed
	}
	defer t.backend.Close()
	cl, err := semaphore.New(t.backend, hid)
	if err != nil {
		close(stopWatch)
		fmt.Fprintf(env.stderr, "coordd sem run: %v\n", err)
		return child.ExitCoorddFailed
	}
	stopTell := func() {}
	var onHold func(backends.LossHoldError)
	if env.stderrTerminal && !*noWait {
		var hold *holdNote
		stopTell, hold = tellWaiting(waitCtx, env, t)
		onHold = hold.say
	}
	l, err := cl.Acquire(waitCtx, name, semaphore.AcquireOptions{Lease: t.applied.Lease, NoWait: *noWait, Wait: *wait, WaitSince: started, Key: *key, OnLossHold: onHold})
	stopTell()
	close(stopWatch)
	<-watchDone
	if err != nil && waitSig == nil && ctx.Err() != nil {
		// INT and TERM also end ctx (main's NotifyContext), which can end
		// the wait before the watcher above took the signal: it is in sigs.
		select {
		case s := <-sigs:
			waitSig = s
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return acquireFailed(env, t, name, err, waitSig, *noWait)
	}
	return runHolding(ctx, env, t, l, argv, sigs)
}

// acquireFailed reports why sem run got no slot and returns its exit
// code: 75 when the slot was not granted (busy, the line full, and with
// --no-wait a backend that could not be asked), 128+N when a signal ended
// the wait, 125 for what needs an operator (a semaphore never applied).
func acquireFailed(env *cliEnv, t *semTarget, name string, err error, waitSig os.Signal, noWait bool) int {
	switch {
	case errors.Is(err, semaphore.ErrNotAcquired), errors.Is(err, backends.ErrTooManyWaiters):
		// err says "not acquired" and why (semaphore.ErrNotAcquired).
		fmt.Fprintf(env.stderr, "coordd sem run: %s: %v\n", t.label(), err)
		return child.ExitNotAcquired
	case waitSig != nil:
		fmt.Fprintf(env.stderr, "coordd sem run: %s: interrupted while waiting (%v)\n", t.label(), waitSig)
		return 128 + int(waitSig.(syscall.Signal))
	case noWait && semaphore.Unreachable(err):
		// --no-wait waits for nothing, the backend included: it could not
		// be asked now, a temporary failure as a busy semaphore is (75),
		// not a configuration error (125).
		fmt.Fprintf(env.stderr, "coordd sem run: %s: not acquired: backend %q could not be reached (--no-wait): %v\n", t.label(), t.local.Backend, err)
		return child.ExitNotAcquired
	case errors.Is(err, backends.ErrNotFound):
		fmt.Fprintf(env.stderr, "coordd sem run: semaphore %q is not applied on backend %q; run coordd apply (%v)\n", name, t.local.Backend, err)
		return child.ExitCoorddFailed
	default:
		fmt.Fprintf(env.stderr, "coordd sem run: %v\n", err)
		return child.ExitCoorddFailed
	}
}

// tellWaiting tells a person at a terminal what sem run waits for, once the
// wait has lasted a moment and again when that changes: "waiting for
// semaphore s: 2 of 2 held by web1 pid 123, web2 pid 9; 2 in line, this
// one included", or, during a data-loss hold, "waiting for semaphore s:
// backend r lost its data (restarted empty or flushed); semaphores return
// at 01:24:39" (hold.say, which Acquire calls). Without it a waiting sem
// run looks hung. The returned func stops it; nothing is printed after it
// returns.
func tellWaiting(ctx context.Context, env *cliEnv, t *semTarget) (stop func(), hold *holdNote) {
	ctx, cancel := context.WithCancel(ctx)
	hold = &holdNote{env: env, t: t, ctx: ctx}
	adm := t.backend.Semaphores()
	if adm == nil {
		return func() { hold.mu.Lock(); cancel(); hold.mu.Unlock() }, hold
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for wait := 500 * time.Millisecond; ; wait = 2 * time.Second {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if hold.holding() {
				continue // the hold's line says it all
			}
			m, err := adm.ObserveSemaphores(ctx, []string{t.name})
			if err != nil || m[t.name] == nil {
				continue
			}
			msg := waitingText(t, m[t.name])
			hold.mu.Lock()
			if msg != last && ctx.Err() == nil {
				last = msg
				fmt.Fprintf(env.stderr, "coordd sem run: %s\n", msg)
			}
			hold.mu.Unlock()
		}
	}()
	return func() { hold.mu.Lock(); cancel(); hold.mu.Unlock(); <-done }, hold
}

// holdNote prints the data-loss hold sem run waits for (tellWaiting).
type holdNote struct {
	env *cliEnv
	t   *semTarget
	ctx context.Context

	mu  sync.Mutex
	end time.Time // monotonic: the hold's end, plus the re-creation
}

// say prints h, once per change (semaphore.AcquireOptions.OnLossHold).
func (n *holdNote) say(h backends.LossHoldError) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ctx.Err() != nil {
		return
	}
	n.end = time.Now().Add(h.Left + 2*time.Second)
	fmt.Fprintf(n.env.stderr, "coordd sem run: waiting for semaphore %s: %v\n", n.t.label(), &h)
}

// holding reports whether a hold was printed that has not ended yet.
func (n *holdNote) holding() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.end)
}

// waitingText is tellWaiting's line for the observed state st.
func waitingText(t *semTarget, st *backends.SemaphoreState) string {
	holders, waiters := st.Holders, st.Waiters
	if t.key != "" {
		holders, waiters = nil, 0
		for _, i := range st.Instances {
			if i.Key == t.key {
				holders, waiters = i.Holders, i.Waiters
			}
		}
	}
	var who []string
	for i, h := range holders {
		if i == 3 {
			who = append(who, fmt.Sprintf("%d more", len(holders)-3))
			break
		}
		who = append(who, fmt.Sprintf("%s pid %d", esc(h.Host), h.PID))
	}
	msg := fmt.Sprintf("waiting for semaphore %s: %d of %d held", t.label(), len(holders), t.applied.Limit)
	if len(who) > 0 {
		msg += " by " + strings.Join(who, ", ")
	}
	if waiters > 0 {
		msg += fmt.Sprintf("; %d in line, this one included", waiters)
	}
	return msg
}

// runHolding runs argv while l is held and renewed, then releases it.
func runHolding(ctx context.Context, env *cliEnv, t *semTarget, l *semaphore.Lease, argv []string, sigs <-chan os.Signal) int {
	lease := t.applied.Lease
	grace := min(lease/3, 10*time.Second)
	// An acquire that hung in a stalled backend leaves the command little
	// of its lease, and the supervisor would stop it at once: renew first.
	if left := time.Until(l.Deadline()); left < lease/2 && left > 0 {
		ectx, cancel := context.WithTimeout(ctx, left)
		err := l.Extend(ectx)
		cancel()
		if errors.Is(err, backends.ErrLost) {
			fmt.Fprintf(env.stderr, "coordd sem run: %s: the slot was lost before the command started: %v\n", t.label(), err)
			return child.ExitLeaseLost
		}
	}
	vars := []string{
		child.VarSemaphore + "=" + t.name,
		child.VarSlot + "=" + strconv.Itoa(l.Slot),
		child.VarFencingToken + "=" + strconv.FormatInt(l.Fencing, 10),
	}
	if t.key != "" {
		vars = append(vars, child.VarSemaphoreKey+"="+t.key)
	}
	p, err := child.Start(ctx, child.Spec{
		Argv:  argv,
		Stdin: env.stdin, Stdout: env.stdout, Stderr: env.stderr,
		Env:   vars,
		Lease: lease, Margin: semaphore.Margin(lease), Grace: grace, AcquiredAt: l.RenewedAt(),
		Timeout: t.applied.MaxHold, KillGrace: grace,
		Shim:  selfExe(),
		Unset: t.unset,
	})
	release := func() { releaseLease(ctx, env, t.label(), l) }
	if err != nil {
		release()
		fmt.Fprintf(env.stderr, "coordd sem run: %v\n", err)
		return child.ExitCode(child.Result{StartErr: err})
	}
	kctx, stopKeep := context.WithCancel(ctx)
	go l.KeepAlive(kctx, p.Renewed)

	lost := false
	for done := false; !done; {
		select {
		case s := <-sigs:
			_ = p.Signal(s.(syscall.Signal))
		case <-l.Lost():
			// Another owner has the slot: stop the child now rather than at
			// the deadline.
			if !lost {
				lost = true
				fmt.Fprintf(env.stderr, "coordd sem run: %s: slot lost; stopping the command\n", t.label())
				_ = p.Signal(syscall.SIGTERM)
				go func() {
					select {
					case <-p.Done():
					case <-time.After(grace):
						_ = p.Signal(syscall.SIGKILL)
					}
				}()
			}
		case <-p.Done():
			done = true
		}
	}
	stopKeep()
	res := p.Wait()
	release()
	if lost || res.LeaseLost {
		return child.ExitLeaseLost
	}
	return child.ExitCode(res)
}

// label names the semaphore, and the instance's key, in messages.
func (t *semTarget) label() string {
	if t.key == "" {
		return t.name
	}
	return t.name + " key " + esc(t.key)
}

// semStatusJSON is one semaphore in `sem status --json`.
type semStatusJSON struct {
	Name    string            `json:"name"`
	Backend string            `json:"backend"`
	Limit   int               `json:"limit"`
	Lease   string            `json:"lease"`
	Mode    string            `json:"mode,omitempty"`
	Slots   int               `json:"slots"`
	Holders []backends.Holder `json:"holders"`
	Waiters int               `json:"waiters"`
	// Line lists the waiters in the order they will be served, on a
	// backend that keeps a line (status_waiters.go).
	Line    []backends.Waiter `json:"line,omitempty"`
	Applied bool              `json:"applied"`
	// Keyed semaphores: their live instances (with --key, only that one,
	// and Holders and Waiters are that instance's).
	Keyed     bool                     `json:"keyed,omitempty"`
	Key       string                   `json:"key,omitempty"`
	Instances []backends.InstanceState `json:"instances,omitempty"`
}

// semStatus is `coordd sem status [--json] [--key K] [NAME...]`: the
// declared semaphores (or the named ones), each observed on its backend.
func semStatus(ctx context.Context, c *command, env *cliEnv, args []string) int {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	asJSON := fs.Bool("json", false, "print JSON")
	key := fs.String("key", "", "show only this instance of a keyed semaphore")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if *key != "" && len(pos) != 1 {
		fmt.Fprintln(env.stderr, "coordd sem status: --key needs exactly one semaphore NAME")
		return 1
	}
	if *key != "" {
		if err := backends.CheckInstanceKey(*key); err != nil {
			fmt.Fprintf(env.stderr, "coordd sem status: --key: %v\n", err)
			return 1
		}
	}
	s, ok := loadSpec(ctx, env, *path, false)
	if !ok {
		return 1
	}
	names, byBackend, ok := semStatusNames(env, s, pos, *key)
	if !ok {
		return 1
	}
	states, lines, ok := observeSemStatus(ctx, env, s, byBackend)
	if !ok {
		return 1
	}
	out := make([]semStatusJSON, 0, len(names))
	for _, n := range names {
		out = append(out, semStatusRow(n, s.Semaphores[n].Backend, states[n], lines[n], *key))
	}
	if *asJSON {
		_ = writeJSON(env.stdout, out)
		return 0
	}
	writeSemStatusText(env, out)
	return 0
}

// semStatusNames returns the semaphores to show (pos, or every declared
// one in name order) and groups them by backend. It reports false, having
// said why on stderr, when one is not declared or --key names an instance
// of one that is not keyed.
func semStatusNames(env *cliEnv, s *spec.Spec, pos []string, key string) ([]string, map[string][]string, bool) {
	var names []string
	if len(pos) > 0 {
		names = pos
	} else {
		for n := range s.Semaphores {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	byBackend := map[string][]string{}
	for _, n := range names {
		sem := s.Semaphores[n]
		if sem == nil {
			fmt.Fprintf(env.stderr, "coordd sem status: semaphore %q is not declared\n", n)
			return nil, nil, false
		}
		if key != "" && !sem.Keyed {
			fmt.Fprintf(env.stderr, "coordd sem status: semaphore %q is not keyed: --key does not apply\n", n)
			return nil, nil, false
		}
		byBackend[sem.Backend] = append(byBackend[sem.Backend], n)
	}
	return names, byBackend, true
}

// observeSemStatus reads the state of each semaphore and, on a backend
// that keeps one, its line of waiters, one backend at a time (opened read
// only and closed again). A semaphore never applied has a nil state. It
// reports false, having said why on stderr, when a backend fails.
func observeSemStatus(ctx context.Context, env *cliEnv, s *spec.Spec, byBackend map[string][]string) (map[string]*backends.SemaphoreState, map[string][]backends.Waiter, bool) {
	states := map[string]*backends.SemaphoreState{}
	lines := map[string][]backends.Waiter{}
	for bn, ns := range byBackend {
		adm, b, err := openAs(ctx, s, bn, "semaphores", true, backends.Backend.Semaphores)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd sem status: %v\n", err)
			return nil, nil, false
		}
		m, err := adm.ObserveSemaphores(ctx, ns)
		if err != nil {
			b.Close()
			fmt.Fprintf(env.stderr, "coordd sem status: %v\n", err)
			return nil, nil, false
		}
		for n, st := range m {
			states[n] = st
			if st != nil {
				_, lines[n] = semLine(ctx, adm, n, st)
			}
		}
		b.Close()
	}
	return states, lines, true
}

// semStatusRow is semaphore n as `sem status` shows it, from its state st
// (nil when not applied) and its line; with key, only that instance of a
// keyed semaphore.
func semStatusRow(n, backend string, st *backends.SemaphoreState, line []backends.Waiter, key string) semStatusJSON {
	row := semStatusJSON{Name: n, Backend: backend, Holders: []backends.Holder{}}
	if st == nil {
		return row
	}
	row.Applied, row.Limit, row.Lease, row.Slots = true, st.Config.Limit, st.Config.Lease.String(), st.Slots
	row.Mode = st.Config.Mode
	row.Holders = append(row.Holders, st.Holders...)
	row.Waiters, row.Line = st.Waiters, line
	row.Keyed, row.Instances = st.Config.Keyed, st.Instances
	if key != "" {
		// One instance: an idle one has no holder and no waiter.
		row.Key, row.Holders, row.Waiters, row.Instances, row.Line = key, []backends.Holder{}, 0, nil, nil
		for _, i := range st.Instances {
			if i.Key == key {
				row.Holders, row.Waiters = append(row.Holders, i.Holders...), i.Waiters
				row.Instances = []backends.InstanceState{i}
			}
		}
		for _, w := range line {
			if w.Key == key {
				row.Line = append(row.Line, w)
			}
		}
	}
	return row
}

// writeSemStatusText prints the rows of `sem status` as aligned text: a
// line per semaphore, then its holders (per instance for a keyed one) and
// its line of waiters.
func writeSemStatusText(env *cliEnv, out []semStatusJSON) {
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	for _, r := range out {
		if !r.Applied {
			fmt.Fprintf(tw, "semaphore.%s\tnot applied (run coordd apply)\n", r.Name)
			continue
		}
		name := "semaphore." + r.Name
		switch {
		case r.Key != "":
			name += " key " + esc(r.Key)
		case r.Keyed:
			name += fmt.Sprintf(" (keyed, %d instances)", len(r.Instances))
		}
		fmt.Fprintf(tw, "%s\tbackend %s\tmode %s\tlimit %d\tlease %s\tholders %d\twaiters %d\n", name, r.Backend, esc(r.Mode), r.Limit, r.Lease, len(r.Holders), r.Waiters)
		if r.Keyed && r.Key == "" {
			for _, i := range r.Instances {
				fmt.Fprintf(tw, "  key %s\tholders %d\twaiters %d\n", esc(i.Key), len(i.Holders), i.Waiters)
				writeHolders(tw, "    ", i.Holders)
			}
			objectStatus{Line: r.Line}.writeLine(env, tw)
			continue
		}
		writeHolders(tw, "  ", r.Holders)
		objectStatus{Line: r.Line}.writeLine(env, tw)
	}
	tw.Flush()
}

// writeHolders prints one line per holder, indented.
func writeHolders(w io.Writer, indent string, hs []backends.Holder) {
	for _, h := range hs {
		// A session-mode slot has no expiry: it is held while the MySQL
		// connection (processlist id) holds its lock.
		until := "expires " + h.ExpiresAt.UTC().Format(time.RFC3339)
		if h.Session != 0 {
			until = fmt.Sprintf("connection %d", h.Session)
		}
		since := "-"
		if !h.AcquiredAt.IsZero() {
			since = h.AcquiredAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%sslot %d\thost %s\tpid %d\tsince %s\t%s\tfencing %d\n", indent, h.Slot, esc(h.Host), h.PID, since, until, h.Fencing)
	}
}

// releaseLease releases the slot of sem run, retrying a failure for
// retry.Budget: a slot left taken by a blip stays taken for a whole lease.
// Each failure is reported on stderr.
func releaseLease(ctx context.Context, env *cliEnv, name string, l *semaphore.Lease) {
	err := retry.Final(context.WithoutCancel(ctx), retry.Budget, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return l.Release(rctx)
	}, func(err error, next time.Duration) {
		if next > 0 {
			fmt.Fprintf(env.stderr, "coordd sem run: %s: releasing the slot failed (retrying in %v): %v\n", name, next, err)
		}
	})
	switch {
	case err == nil:
	case errors.Is(err, backends.ErrLost):
		fmt.Fprintf(env.stderr, "coordd sem run: %s: the slot was already lost when released\n", name)
	default:
		fmt.Fprintf(env.stderr, "coordd sem run: %s: releasing the slot failed; it stays taken until its lease expires: %v\n", name, err)
	}
}
