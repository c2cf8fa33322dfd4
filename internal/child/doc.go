// Package child starts and supervises the command that coordd runs while it
// holds a lease (cron tasks, `coordd sem run NAME -- cmd`, queue workers).
//
// # Process group and signals
//
// The child is started in its own process group (Setpgid), whose id is the
// child's pid. [Process.Signal] sends to the whole group (kill(-pgid, sig)),
// so a shell and the commands it spawned all receive the signals the caller
// forwards (INT, TERM, HUP, QUIT), and every escalation (TERM, then KILL) made
// by the supervisor also reaches the whole group.
//
// When the child (the group leader) exits, whatever is left in its process
// group is sent SIGKILL before the child is reaped: a background job left
// behind by the command must not keep running after coordd has released the
// lease. While the leader is a zombie its pid cannot be reused, so the
// supervisor never signals a recycled process group: the leader's exit is
// observed with waitid(WNOWAIT), signals are disabled, and only then is the
// leader reaped.
//
// # Parent death: Pdeathsig and the locked thread
//
// The child is started with Pdeathsig = SIGKILL, so that if coordd itself is
// killed (kill -9, OOM killer) its child dies with it instead of running on
// without a lease. The kernel delivers the parent-death signal when the
// *thread* that forked the child exits, not when the process exits
// (golang/go#27505). A Go program's threads come and go: a goroutine that is
// not locked can fork on a thread that the runtime later retires, and the
// child would then be killed at a random moment. Start therefore forks and
// waits from a goroutine that called runtime.LockOSThread and stays locked
// until the child has been reaped; the thread lives exactly as long as the
// child needs it.
//
// # The shim: the whole group dies with coordd
//
// Pdeathsig only reaches the direct child. With Spec.Shim set, the direct
// child is a small shim process (coordd's own executable started with a
// hidden first argument; [MaybeRunShim] runs it) that starts the command
// and waits for it:
//
//	coordd ── shim (group leader, Pdeathsig SIGTERM) ── command (same group, Pdeathsig SIGKILL) ── …
//
// The shim is started exactly as a child without a shim (own process group,
// forked from the locked thread) but with Pdeathsig = SIGTERM, which it
// catches. It starts the command in its own process group, from a locked
// thread, with Pdeathsig = SIGKILL, and passes on the working directory,
// the environment and stdin/stdout/stderr; the command's path and argv come
// on the shim's argv (the PATH lookup is done by coordd, as without a shim).
// When the shim gets TERM, INT, HUP or QUIT it looks at its parent: if it was
// reparented, coordd died and the shim SIGKILLs the whole process group,
// itself included; otherwise coordd forwarded the signal to the group, the
// command received it too, and the shim keeps waiting.
//
// A pipe on the shim's fd 3 carries "started", or the errno of a failed
// exec (so Start still returns [ErrNotFound] or [ErrNotExecutable]), and at
// the end the command's wait status, from which the [Result] is made: exit
// codes, Signaled/Signal and so [ExitCode] are the command's, not the
// shim's. A shim that cannot be started or does not speak the protocol is
// coordd's failure (ExitCoorddFailed), not "command not found". Lease,
// timeout and cancellation work as without a shim: they signal the group,
// which the shim leads. [Process.Pid] is then the shim's pid.
//
// coordd passes its own executable (os.Executable) as the shim; after an
// in-place upgrade that is the new binary at the same path, which must
// speak the same shim protocol (its version travels in the arguments, and a
// mismatch fails the start). Each running command costs one more small Go
// process; the guard (below) shares one among all the commands of a coordd
// process.
//
// # The guard: one process for many commands
//
// A shim costs a process start per command (a copy of coordd, milliseconds
// of CPU): a daemon starting a thousand cron runs in one second cannot
// afford it. With Spec.Guard set, the command is started by the guard,
// one process per coordd process (coordd's own executable with another
// hidden argument, started on first use; [MaybeRunShim] runs it too):
//
//	coordd ── guard (own group, no environment) ─┬─ command (group leader, Pdeathsig SIGKILL) ── …
//	                                             └─ command ── …
//
// coordd sends each command over a unix socket (SOCK_SEQPACKET): its path,
// argv, environment and directory in JSON, and as SCM_RIGHTS a status
// socket and its stdout, stderr and stdin (pipes that coordd copies, as
// exec.Cmd does, or files passed on as they are; an absent one is
// /dev/null). The guard starts the command in its own process group with
// Pdeathsig SIGKILL, from a goroutine locked to its thread until the
// command is reaped, and speaks the shim's status lines on the status
// socket: "started PID" or "error ERRNO MESSAGE"; then "exited" once the
// command, the group leader, exited and the guard killed the rest of its
// group (observed with waitid(WNOWAIT), so the group id is still the
// command's); it then waits for coordd's "reap", sent once coordd stopped
// signalling the group, before it reaps; last "status WAITSTATUS". So
// [Process.Signal] still signals the group from coordd (coordd and the
// command are the same user), never a recycled one, and [Process.Pid] is
// the command's.
//
// When coordd dies, its end of the control socket closes: the guard kills
// the group of every command it has not reaped (with that kill it holds
// back every start and reap, so no command starts unseen and no group id
// is freed meanwhile) and exits, which ends the commands' threads and so
// fires their Pdeathsig as well. The guard catches TERM, INT, HUP and QUIT
// and ignores them: signals sent to everything (a service stop) are
// coordd's to act on. Limits, beyond a shim's:
//
//   - A kill -9 of the guard alone kills the commands (Pdeathsig) but not
//     the rest of their groups; coordd reports the runs failed
//     (ExitCoorddFailed) and kills each group, which is safe only while
//     one of its members lives (the group id is then still in use), and
//     starts a new guard for the next command.
//   - A command handed to the guard in the instant it dies fails to start
//     (coordd's failure, not the command's).
//   - A command whose argv and environment exceed guardMaxMsg (1 MiB), or
//     the socket's buffer, is started under a shim of its own when
//     Spec.Shim is set.
//
// # Environment
//
// The command gets coordd's environment minus Spec.Unset (the variables the
// spec's backend connection fields reference: the backends' secrets), plus
// Spec.Env. With a shim, the shim is started with that environment and
// passes it on unchanged, so neither process holds the removed variables.
//
// # Lease deadline
//
// With a non-zero Spec.Lease the supervisor keeps a deadline on the monotonic
// clock:
//
//	deadline = sentAt(last successful renewal) + Lease − Margin
//
// where sentAt is the time taken (with time.Now, so it carries a monotonic
// reading) *before* the renewal request was sent: the backend's lease started
// no earlier than that, so the deadline can only be early, never late.
// Margin absorbs clock-rate differences between this host and the backend.
// The first deadline comes from Spec.AcquiredAt, the send time of the request
// that acquired or last renewed the lease; later ones from [Process.Renewed]. An older sentAt
// never moves the deadline back.
//
// If no renewal arrives in time, the process group gets SIGTERM at
// deadline − Grace and SIGKILL at the deadline (Grace ≤ Lease/3). Once the
// TERM has been sent the lease counts as lost: later renewals no longer move
// the KILL. The result then reports LeaseLost, and [ExitCode] maps it to
// [ExitLeaseLost]. Times handed to Renewed must keep their monotonic reading
// (do not serialise them or call Round(0)); otherwise wall-clock jumps can
// move the deadline.
//
// # Timeout and cancellation
//
// Spec.Timeout (max_hold, cron timeout) sends SIGTERM once the child has run
// that long and SIGKILL KillGrace later (DefaultKillGrace when zero); the
// result reports TimedOut. Cancelling the context passed to Start does the
// same (TERM, then KILL after KillGrace) and reports Canceled.
//
// # Exit codes
//
// [ExitCode] maps a [Result] the way a shell does: the child's own exit code,
// 128+N when signal N killed it, 126 when the command could not be executed
// (permission denied, exec format error), 127 when it was not found; plus
// coordd's own codes ExitNotAcquired, ExitLeaseLost and ExitCoorddFailed.
// A command that cannot be executed is reported by Start (ErrNotFound,
// ErrNotExecutable), never as a Result, so a command that runs and exits
// 127 itself stays distinguishable from one that could not start.
// [Resolve] makes the same lookup up front, before a caller commits to
// anything (`queue work` claims no job for a command that cannot start).
//
// # Limits
//
//   - Descendants that leave the process group (setsid, setpgid, a daemon's
//     double fork) are outside every guarantee of this package: they receive
//     neither the forwarded signals nor the lease/timeout escalation, and they
//     survive the child's exit.
//   - Without a shim, Pdeathsig only covers the direct child. If coordd is
//     killed -9, the child dies, but other members of its process group
//     (the commands a shell started, a pipeline's other stages) are not
//     signalled by the kernel and run on, reparented to init. A shell `-c`
//     string consisting of a single simple command is usually exec'ed by
//     the shell itself and is then covered. With a shim the whole group
//     dies with coordd.
//   - A kill -9 of the shim itself while coordd lives is handled by coordd
//     (the leader exited, so the group is killed). But if the shim and
//     coordd die together by SIGKILL (both chosen by the OOM killer, a
//     kill -9 of both), only the command dies, through its Pdeathsig; the
//     rest of the group runs on, as without a shim.
//   - Pdeathsig is cleared by the kernel when the child (or, with a shim,
//     the command) executes a set-user-ID or set-group-ID program; with a
//     shim the group kill on coordd's death still applies.
//   - After the leader exits, Wait waits at most WaitDelay for descendants
//     outside the group that still hold the child's stdout/stderr pipes.
package child
