package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/tailbuf"
	"github.com/coordd/coordd/queue"
)

// queue work: claims jobs and runs a command once per job, the payload on
// its stdin, under the job's lease (package queue does the claiming and
// the lease keeping; commandWorker runs the commands).

// workArgs are queue work's flags and arguments.
type workArgs struct {
	path, name, host string
	argv             []string
	conc             int
	drain, readyOnly bool
}

// parseWorkArgs reads queue work's command line; on a bad one it says why
// and returns nil and the exit status.
func parseWorkArgs(c *command, env *cliEnv, args []string) (*workArgs, int) {
	fs := newFlags(c, env)
	path := specFlag(fs, env)
	conc := fs.Int("concurrency", 1, "how many commands run at once")
	drain := fs.Bool("drain", false, "exit once no job is ready, delayed or in flight")
	readyOnly := fs.Bool("ready-only", false, "exit once no job is ready now (implies --drain; delayed jobs and other workers' jobs are not waited for)")
	host := fs.String("host-id", "", "host id in the owner tokens (default: the hostname)")
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		return nil, flagExit(err)
	}
	if len(pos) == 0 {
		fmt.Fprintln(env.stderr, "coordd queue work: missing queue NAME")
		return nil, 1
	}
	a := &workArgs{path: *path, name: pos[0], host: *host, argv: append(pos[1:], rest...), conc: *conc,
		drain: *drain || *readyOnly, readyOnly: *readyOnly}
	if len(a.argv) == 0 {
		fmt.Fprintln(env.stderr, "coordd queue work: missing command after --")
		return nil, 1
	}
	if a.conc < 1 {
		fmt.Fprintln(env.stderr, "coordd queue work: --concurrency must be at least 1")
		return nil, 1
	}
	return a, 0
}

func queueWork(ctx context.Context, c *command, env *cliEnv, args []string) int {
	a, code := parseWorkArgs(c, env, args)
	if a == nil {
		return code
	}
	// A command that cannot start would fail every job it is given and
	// spend its attempts: refuse before claiming anything.
	if _, err := child.Resolve(a.argv[0]); err != nil {
		fmt.Fprintf(env.stderr, "coordd queue work: %s: cannot run the command: %v; no job was claimed\n", a.name, err)
		return workExit(err)
	}
	hid, err := hostID(env, a.host)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue work: %v\n", err)
		return 1
	}

	// Signals: the first stops claiming; every one is forwarded to the
	// running commands, which are left to finish.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openQueue(ctx, env, a.path, a.name, false)
	if err != nil {
		reportErr(env, "coordd queue work", err)
		return 1
	}
	defer t.backend.Close()
	cl, err := queue.New(t.backend)
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd queue work: %v\n", err)
		return 1
	}
	w := newCommandWorker(env, t, a.argv)
	defer w.forwardSignals(sigs)()
	// The commands are stopped by signals (forwarded) and by their lease,
	// not by the end of ctx: a stop lets them finish.
	if err := cl.Work(context.WithoutCancel(ctx), a.name, w.options(a, hid), w.handle); err != nil {
		w.reportStop(err)
		return workExit(err)
	}
	return 0
}

// commandWorker runs queue work's command once per job and keeps track of
// the running commands, for the signals it forwards to them.
type commandWorker struct {
	name           string
	argv           []string
	target         *queueTarget
	stdout, stderr io.Writer
	// stop is closed by the first signal: no new job is claimed.
	stop chan struct{}

	mu       sync.Mutex
	running  map[*child.Process]bool
	startErr error // the first failed start

	lastWait string // the last draining message, said once per change
}

func newCommandWorker(env *cliEnv, t *queueTarget, argv []string) *commandWorker {
	return &commandWorker{name: t.name, argv: argv, target: t, stdout: shareable(env.stdout), stderr: shareable(env.stderr),
		stop: make(chan struct{}), running: map[*child.Process]bool{}}
}

// forwardSignals forwards every signal of sigs to the running commands,
// and on the first one stops claiming, until the function it returns is
// called.
func (w *commandWorker) forwardSignals(sigs <-chan os.Signal) (done func()) {
	watchDone := make(chan struct{})
	go func() {
		stopped := false
		for {
			select {
			case s := <-sigs:
				if !stopped {
					stopped = true
					fmt.Fprintf(w.stderr, "coordd queue work: %s: %v: no new jobs; waiting for the running commands\n", w.name, s)
					close(w.stop)
				}
				w.mu.Lock()
				for p := range w.running {
					_ = p.Signal(s.(syscall.Signal))
				}
				w.mu.Unlock()
			case <-watchDone:
				return
			}
		}
	}()
	return func() { close(watchDone) }
}

// options are the worker options of queue work's flags.
func (w *commandWorker) options(a *workArgs, hostID string) queue.WorkerOptions {
	return queue.WorkerOptions{
		Concurrency: a.conc,
		Drain:       a.drain,
		ReadyOnly:   a.readyOnly,
		DrainWait: func(st backends.QueueState) {
			if msg := drainWaitText(st); msg != w.lastWait {
				w.lastWait = msg
				fmt.Fprintf(w.stderr, "coordd queue work: %s: draining: %s\n", w.name, msg)
			}
		},
		Owner: fmt.Sprintf("%s:%d", hostID, os.Getpid()),
		Stop:  w.stop,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(w.stderr, "coordd queue work: "+format+"\n", args...)
		},
	}
}

// handle is the queue.Handler: it runs the command on job j under the
// job's lease and returns why it failed (nil: it exited 0).
func (w *commandWorker) handle(hctx context.Context, j backends.Job) error {
	l := queue.LeaseOf(hctx)
	stderr := tailbuf.New(stderrTail)
	p, err := w.start(hctx, j, l, stderr)
	if err != nil {
		return err
	}
	l.OnRenew(p.Renewed)
	p.Renewed(l.RenewedAt()) // a renewal between Start and OnRenew
	w.mu.Lock()
	w.running[p] = true
	w.mu.Unlock()
	res := p.Wait()
	w.mu.Lock()
	delete(w.running, p)
	w.mu.Unlock()
	return withStderr(resultError(res), stderr)
}

// stderrTail is how much of a failed command's stderr its job records
// with the error: its end, where the reason usually is.
const stderrTail = 4 << 10

// withStderr adds the tail of the command's stderr to the error of a
// failed run, so that `queue dead`, its JSON and the dashboard show why it
// failed ("cannot decode image"), not only "exit status 1".
func withStderr(err error, stderr *tailbuf.Buffer) error {
	b := bytes.TrimRight(stderr.Bytes(), "\r\n")
	if err == nil || len(b) == 0 {
		return err
	}
	tail := strings.ToValidUTF8(string(b), "\uFFFD")
	if stderr.Cut() {
		tail = "..." + tail
	}
	return fmt.Errorf("%w; stderr: %s", err, tail)
}

// start starts the command on job j. A start that fails for a reason of
// the worker's (queue.ErrCannotStart) sends the job back unworked and
// stops the worker.
func (w *commandWorker) start(hctx context.Context, j backends.Job, l *queue.Lease, stderrTail io.Writer) (*child.Process, error) {
	applied := w.target.applied
	vis := applied.VisibilityTimeout
	grace := min(vis/3, 10*time.Second)
	p, err := child.Start(hctx, child.Spec{
		Argv:   w.argv,
		Stdin:  bytes.NewReader(j.Payload),
		Stdout: w.stdout, Stderr: io.MultiWriter(w.stderr, stderrTail),
		Env: []string{
			"COORDD_QUEUE=" + w.name,
			"COORDD_JOB_ID=" + strconv.FormatInt(j.ID, 10),
			"COORDD_ATTEMPT=" + strconv.Itoa(j.Attempt),
		},
		Lease: vis, Margin: queue.Margin(vis), Grace: grace, AcquiredAt: l.RenewedAt(),
		Timeout: applied.Timeout, KillGrace: grace,
		Shim:  selfExe(),
		Unset: w.target.unset,
	})
	if err == nil {
		return p, nil
	}
	if hctx.Err() != nil {
		return nil, err // the lease was lost before the start
	}
	// Not the job's fault (the command vanished since the check, its #!
	// interpreter is missing): the job goes back with its attempt not
	// counted, and the worker stops.
	if errors.Is(err, child.ErrNotFound) {
		err = fmt.Errorf("%w (the command or its #! interpreter is missing)", err)
	}
	w.mu.Lock()
	if w.startErr == nil {
		w.startErr = err
	}
	w.mu.Unlock()
	return nil, fmt.Errorf("%w: %w", queue.ErrCannotStart, err)
}

// reportStop says why Work failed.
func (w *commandWorker) reportStop(err error) {
	if !errors.Is(err, queue.ErrCannotStart) {
		fmt.Fprintf(w.stderr, "coordd queue work: %v\n", err)
		return
	}
	// The job it was given went back (logged by Work, with its id): this
	// line says why once.
	w.mu.Lock()
	why := w.startErr
	w.mu.Unlock()
	fmt.Fprintf(w.stderr, "coordd queue work: %s: stopped, the command cannot start: %v\n", w.name, why)
}

// lockedWriter serializes writes of concurrent children to a writer that
// is not a file (an *os.File is handed to the children as is).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// drainWaitText says what a draining worker still waits for: "waiting for
// 1 delayed job, due at 17:57:00 UTC, and 2 in flight".
func drainWaitText(st backends.QueueState) string {
	var parts []string
	if n := st.ReadyNow(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d ready", n))
	}
	if st.Delayed > 0 {
		d := fmt.Sprintf("%d delayed %s", st.Delayed, plural(st.Delayed, "job", "jobs"))
		if !st.NextDelayed.IsZero() {
			layout := "15:04:05 MST"
			if time.Until(st.NextDelayed) > 12*time.Hour {
				layout = "2006-01-02 15:04:05 MST"
			}
			d += ", " + map[bool]string{true: "the first ", false: ""}[st.Delayed > 1] + "due at " + st.NextDelayed.UTC().Format(layout)
		}
		parts = append(parts, d)
	}
	if st.InFlight > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", st.InFlight))
	}
	if len(parts) == 0 {
		return "waiting"
	}
	msg := "waiting for " + strings.Join(parts, " and ")
	if st.Delayed > 0 {
		msg += " (--ready-only would not wait for delayed jobs)"
	}
	return msg
}

// plural is one when n is 1, else many.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// workExit is the exit status of queue work for err: 127 or 126 when the
// command was not found or is not executable, as a shell says, else 1.
func workExit(err error) int {
	switch {
	case errors.Is(err, child.ErrNotFound):
		return child.ExitNotFound
	case errors.Is(err, child.ErrNotExecutable):
		return child.ExitNotExecutable
	}
	return 1
}

// resultError is nil when the command succeeded, else why it failed (the
// text recorded as the job's last error).
func resultError(r child.Result) error {
	switch {
	case r.LeaseLost:
		return errors.New("lease lost: the command was stopped")
	case r.TimedOut:
		return errors.New("timed out")
	case r.Signaled:
		return fmt.Errorf("killed by signal %v", r.Signal)
	case r.WaitErr != nil && r.ExitCode < 0:
		return fmt.Errorf("wait: %w", r.WaitErr)
	case r.ExitCode != 0:
		return fmt.Errorf("exit status %d", r.ExitCode)
	}
	return nil
}
