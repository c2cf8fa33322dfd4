package chaos

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The evidence is written by the commands coordd runs, never by coordd: one
// append-only file per kind, one line per event, each line small enough
// for O_APPEND to keep it whole.
//
//	cron.log   start|end TASK SCHEDULED_AT ATTEMPT HOST FENCING UNIXTIME
//	sem.log    in|out CLIENT UNIXTIME
//	queue.log  start|done PAYLOAD JOB_ID ATTEMPT WORKER UNIXTIME
//	peaks      one number per entry into the witness: holders alive then
//	fencing    start|end SLOT TOKEN HIGHEST PID: the fencing token a holder
//	           (PID, its shell) of the semaphore's slot got, and the
//	           highest token the protected resource had seen for that slot
//	           before it (start) or when the holder finished (end)

// CronEvent is one line of cron.log.
type CronEvent struct {
	Kind        string // start or end
	Task        string
	ScheduledAt time.Time
	Attempt     int
	Host        string
	Fencing     int64
	At          time.Time
}

// SemEvent is one line of sem.log.
type SemEvent struct {
	Kind   string // in or out
	Client string
	At     time.Time
}

// JobEvent is one line of queue.log.
type JobEvent struct {
	Kind    string // start or done
	Payload string
	JobID   string
	Attempt int
	Worker  string
	At      time.Time
}

// FaultKind names a fault the harness injects.
type FaultKind string

const (
	DaemonKill     FaultKind = "daemon-kill"
	DaemonStop     FaultKind = "daemon-stop"
	ClientKill     FaultKind = "client-kill"
	WorkerKill     FaultKind = "worker-kill"
	BackendRestart FaultKind = "backend-restart"

	// Network faults, between one host, sem run client or queue worker
	// and the backend (see internal/netfault). Target is the member's id,
	// so they strike every incarnation that runs while they last.
	NetBlackhole FaultKind = "net-blackhole" // a partition: bytes held both ways
	NetLatency   FaultKind = "net-latency"   // 100 ms +- 50 each way
	NetSlow      FaultKind = "net-slow"      // a few KB/s each way
	NetReset     FaultKind = "net-reset"     // open connections reset, new ones too
	NetOneWay    FaultKind = "net-oneway"    // bytes held in one direction (Detail)

	// RedisFailover promotes a replica that missed writes and moves the
	// clients' address to it. It needs the detection of a failover that
	// may have lost writes in backends/redis; until then it is off (see
	// Config.Failover).
	RedisFailover FaultKind = "redis-failover"
	// SentinelFailover asks the Sentinels of the redis-sentinel backend
	// to promote the replica (SENTINEL FAILOVER).
	SentinelFailover FaultKind = "sentinel-failover"
)

// outage reports whether k is a fault of the backend itself, felt by
// every client at once.
func (k FaultKind) outage() bool {
	return k == BackendRestart || k == SentinelFailover || k == RedisFailover
}

// NetKinds are the network faults, in the order reports list them.
var NetKinds = []FaultKind{NetBlackhole, NetLatency, NetSlow, NetReset, NetOneWay}

// IsNet reports whether k is a network fault.
func (k FaultKind) IsNet() bool {
	for _, n := range NetKinds {
		if k == n {
			return true
		}
	}
	return false
}

// member is the member id of an incarnation's tag: "w1" for "w1-3".
func memberOf(tag string) string {
	if i := strings.LastIndexByte(tag, '-'); i > 0 {
		return tag[:i]
	}
	return tag
}

// Fault is one injected fault. Its effect lasts from At to End: End equals
// At for a kill, is the SIGCONT of a stop, and the moment the server
// answered again for a backend restart.
type Fault struct {
	Kind   FaultKind
	Target string // host, client or worker id; the backend for a restart
	At     time.Time
	End    time.Time
	// MidOp: the target had an operation in flight when the fault hit (a
	// command of a cron occurrence, a semaphore holder, a job handler; for
	// a backend restart, any of them).
	MidOp bool
	// Detail says more: a one-way fault's direction, a slow link's rate.
	Detail string
}

// cuts reports whether f may have cut owner (a host id, or a client or
// worker tag) off its backend: a network fault on it.
func (f Fault) cuts(owner string) bool {
	return f.Kind.IsNet() && f.Target == memberOf(owner)
}

func (f Fault) overlaps(from, to time.Time) bool {
	return !f.End.Before(from) && !f.At.After(to)
}

// unixTime parses `date +%s.%N`.
func unixTime(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(n, ns), nil
}

// readLines returns the fields of each line of path; a missing file has
// none. A torn last line (a command killed mid-write) is dropped when it
// has fewer than want fields; any other short line is an error.
func readLines(path string, want int) ([][]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	var short string
	for sc.Scan() {
		if short != "" {
			return nil, fmt.Errorf("%s: short line %q", path, short)
		}
		fs := strings.Fields(sc.Text())
		if len(fs) < want {
			short = sc.Text()
			continue
		}
		out = append(out, fs)
	}
	return out, sc.Err()
}

// ReadCron parses cron.log.
func ReadCron(path string) ([]CronEvent, error) {
	lines, err := readLines(path, 7)
	if err != nil {
		return nil, err
	}
	out := make([]CronEvent, 0, len(lines))
	for _, fs := range lines {
		e := CronEvent{Kind: fs[0], Task: fs[1], Host: fs[4]}
		var errs [4]error
		e.ScheduledAt, errs[0] = time.Parse(time.RFC3339Nano, fs[2])
		e.Attempt, errs[1] = strconv.Atoi(fs[3])
		e.Fencing, errs[2] = strconv.ParseInt(fs[5], 10, 64)
		e.At, errs[3] = unixTime(fs[6])
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%s: line %q: %w", path, strings.Join(fs, " "), err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// ReadSem parses sem.log.
func ReadSem(path string) ([]SemEvent, error) {
	lines, err := readLines(path, 3)
	if err != nil {
		return nil, err
	}
	out := make([]SemEvent, 0, len(lines))
	for _, fs := range lines {
		at, err := unixTime(fs[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, SemEvent{Kind: fs[0], Client: fs[1], At: at})
	}
	return out, nil
}

// ReadJobs parses queue.log.
func ReadJobs(path string) ([]JobEvent, error) {
	lines, err := readLines(path, 6)
	if err != nil {
		return nil, err
	}
	out := make([]JobEvent, 0, len(lines))
	for _, fs := range lines {
		e := JobEvent{Kind: fs[0], Payload: fs[1], JobID: fs[2], Worker: fs[4]}
		var err1, err2 error
		e.Attempt, err1 = strconv.Atoi(fs[3])
		e.At, err2 = unixTime(fs[5])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: line %q: %v %v", path, strings.Join(fs, " "), err1, err2)
		}
		out = append(out, e)
	}
	return out, nil
}

// ReadPeaks returns how many holders entered the witness and the most that
// were alive inside it at once.
func ReadPeaks(path string) (entries, peak int, err error) {
	lines, err := readLines(path, 1)
	if err != nil {
		return 0, 0, err
	}
	for _, fs := range lines {
		n, err := strconv.Atoi(fs[0])
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		entries++
		peak = max(peak, n)
	}
	return entries, peak, nil
}

// InFlight is what was in flight at one moment, by owner.
type InFlight struct {
	CronHosts  map[string]int  // host -> running cron commands
	SemClients map[string]bool // client -> inside its command
	Workers    map[string]int  // worker -> running handlers
}

// Any reports whether anything at all was in flight.
func (f InFlight) Any() bool {
	return len(f.CronHosts) > 0 || len(f.SemClients) > 0 || len(f.Workers) > 0
}

// OpenOps reads what is in flight from the logs: starts without their end.
// A start whose command was killed never gets its end, so callers ask only
// about owners they know to be alive.
func OpenOps(cron []CronEvent, sem []SemEvent, jobs []JobEvent) InFlight {
	f := InFlight{CronHosts: map[string]int{}, SemClients: map[string]bool{}, Workers: map[string]int{}}
	type ck struct {
		task    string
		sched   time.Time
		attempt int
	}
	cronOpen := map[ck]string{}
	for _, e := range cron {
		k := ck{e.Task, e.ScheduledAt, e.Attempt}
		if e.Kind == "start" {
			cronOpen[k] = e.Host
		} else {
			delete(cronOpen, k)
		}
	}
	for _, h := range cronOpen {
		f.CronHosts[h]++
	}
	for _, e := range sem {
		if e.Kind == "in" {
			f.SemClients[e.Client] = true
		} else {
			delete(f.SemClients, e.Client)
		}
	}
	type jk struct{ id, attempt string }
	jobOpen := map[jk]string{}
	for _, e := range jobs {
		k := jk{e.JobID, strconv.Itoa(e.Attempt)}
		if e.Kind == "start" {
			jobOpen[k] = e.Worker
		} else {
			delete(jobOpen, k)
		}
	}
	for _, w := range jobOpen {
		f.Workers[w]++
	}
	return f
}

// CronReport is the verdict on one task's occurrences.
type CronReport struct {
	Occurrences int // scheduled times checked
	Starts      int
	// DuplicateStarts counts (scheduled time, attempt) pairs that started
	// more than once: a violation, unless the first start's claim was lost
	// with a failover to a replica that missed it (RerunAfterLostWrite).
	DuplicateStarts     int
	RerunAfterLostWrite int
	// Misses counts scheduled times in the checked window with no attempt
	// started at all: a violation under catch_up: all, unless overlap
	// forbid skipped the time for a run known to overlap it (Skips). (A
	// first attempt whose host was lost between its claim and its
	// command's start shows only as its retry.)
	Misses int
	// Skips counts, under overlap forbid, times that never started because
	// a run that ended (so its host lived) had been running for as long as
	// the time between the two scheduled times: the one skip docs/spec.md
	// allows.
	Skips int
	// Retries counts attempts after the first; each must follow the loss
	// of the previous attempt's host (a kill or stop of it, or a backend
	// restart, while it ran).
	Retries            int
	UnexplainedRetries int
	// FencingReused counts fencing tokens handed to two starts, and
	// retries whose token is not above the previous attempt's.
	FencingReused int
	// Overlaps counts retries that started while the previous attempt's
	// command still ran (its end line came later), and under overlap
	// forbid any start while a run of another scheduled time still ran,
	// unless that run's host was lost.
	Overlaps int
	Problems []string
}

// Add sums two tasks' reports, as the table shows them.
func (r CronReport) Add(o CronReport) CronReport {
	r.Occurrences += o.Occurrences
	r.Starts += o.Starts
	r.DuplicateStarts += o.DuplicateStarts
	r.RerunAfterLostWrite += o.RerunAfterLostWrite
	r.Misses += o.Misses
	r.Skips += o.Skips
	r.Retries += o.Retries
	r.UnexplainedRetries += o.UnexplainedRetries
	r.FencingReused += o.FencingReused
	r.Overlaps += o.Overlaps
	r.Problems = append(append([]string{}, r.Problems...), o.Problems...)
	return r
}

// replicationLag is how long before a RedisFailover's cut a write may still
// have missed the replica.
const replicationLag = time.Second

// lostWrite reports whether a write made between from and to may have been
// lost with a failover to a replica that missed it: the two overlap the
// time from the cut of replication to the promotion. docs/design.md lists what such a
// failover loses (cron claims, pushes, acknowledgements) and what it keeps
// (fencing, terms and job ids only grow; no holder beyond the limit).
func lostWrite(faults []Fault, from, to time.Time) bool {
	for _, f := range faults {
		if f.Kind == RedisFailover && !f.End.Before(from) && !f.At.Add(-replicationLag).After(to) {
			return true
		}
	}
	return false
}

// asyncClaimLoss is how long before a PostgreSQL crash a job's claim may
// have committed and still be lost, its start line written meanwhile: the
// store's claims commit without waiting for the WAL flush
// (backends/postgres, queue_claim.go), which the WAL writer makes within
// three wal_writer_delay (200 ms) at worst.
const asyncClaimLoss = 2 * time.Second

// lostClaim reports whether a job attempt that started at start may have
// been claimed by a write that a PostgreSQL crash lost: a restart of the
// postgres server began at most asyncClaimLoss before the start (the
// start line can come after the crash began) or within a second after it
// (the WAL writer may not have flushed the claim yet). The job is then
// delivered again with the same attempt (design.md: its attempt is not
// counted). Cron claims and every other store's claims wait for the
// flush, and get no such allowance.
func lostClaim(faults []Fault, start time.Time) bool {
	for _, f := range faults {
		if f.Kind == BackendRestart && f.Target == "postgres" && !f.At.After(start.Add(time.Second)) && !f.At.Before(start.Add(-asyncClaimLoss)) {
			return true
		}
	}
	return false
}

// CronCheck is what CheckCron checks one task against.
type CronCheck struct {
	Task string
	// Step is the task's period; Until the last scheduled time that must
	// have started.
	Step  time.Duration
	Until time.Time
	// Lease is the task's run lease; LostWithin bounds how long after a
	// host's loss the retry may come (lease, sweep and retry_backoff).
	Lease, LostWithin time.Duration
	// Forbid: the task runs with overlap forbid.
	Forbid bool
}

// skipSlack is how much shorter than the time between two scheduled times
// a run seen in the evidence may be and still explain a skip: its start
// and end lines come after the scheduler's start and before its record.
const skipSlack = 500 * time.Millisecond

// CheckCron checks a task's starts: every scheduled time of the grid step
// from the first start up to Until started (misses), no attempt started
// twice, fencing tokens unique, and every retry explained by a fault.
//
// An attempt's run lease begins at its claim, before its command writes
// its start line; the gap is short unless the backend stalls, and can
// never exceed the run lease (a claim whose lease ran out is not started).
// So a backend outage explains a retry when it overlaps the window from
// lease before the previous attempt's start to the retry's start: a claim
// that hung in a stalled backend leaves its command too little of the
// lease to renew it in time.
func CheckCron(events []CronEvent, c CronCheck, faults []Fault) CronReport {
	var r CronReport
	starts := map[cronKey]CronEvent{}
	fencing := map[int64]int{}
	var first time.Time
	ends := map[cronKey]time.Time{}
	for _, e := range events {
		if e.Task == c.Task && e.Kind == "end" {
			ends[cronKey{e.ScheduledAt.UnixNano(), e.Attempt}] = e.At
		}
	}
	for _, e := range events {
		if e.Task != c.Task || e.Kind != "start" {
			continue
		}
		r.Starts++
		k := cronKey{e.ScheduledAt.UnixNano(), e.Attempt}
		if p, dup := starts[k]; dup && lostWrite(faults, p.At.Add(-time.Second), p.At) {
			// The claim was a write the promoted replica never had.
			r.RerunAfterLostWrite++
			continue
		} else if dup {
			r.DuplicateStarts++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s attempt %d started twice (hosts %s and %s)", c.Task, e.ScheduledAt.Format(time.RFC3339), e.Attempt, starts[k].Host, e.Host))
			continue
		}
		starts[k] = e
		fencing[e.Fencing]++
		if fencing[e.Fencing] == 2 {
			r.FencingReused++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: fencing token %d given to two starts", c.Task, e.Fencing))
		}
		if first.IsZero() || e.ScheduledAt.Before(first) {
			first = e.ScheduledAt
		}
	}
	if first.IsZero() {
		r.Problems = append(r.Problems, c.Task+": no occurrence started at all")
		return r
	}
	// lost reports whether a fault explains that prev's command stopped
	// short of its end (or kept running, unseen by its host) by the time e
	// started.
	lost := func(prev, e CronEvent) bool {
		for _, f := range faults {
			switch {
			case f.Kind.outage() && f.overlaps(prev.At.Add(-c.Lease), e.At):
				return true
			case f.overlaps(prev.At, e.At) && f.Target == prev.Host && (f.Kind == DaemonKill || f.Kind == DaemonStop):
				return true
			case f.cuts(prev.Host) && f.overlaps(prev.At.Add(-c.Lease), e.At):
				// Its host cut off from the backend (from its claim on)
				// could not renew the run lease.
				return true
			}
		}
		return false
	}
	for k, e := range starts {
		off := time.Duration(k.sched - first.UnixNano())
		if off%c.Step != 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s is not on the %s grid from %s", c.Task, e.ScheduledAt.Format(time.RFC3339Nano), c.Step, first.Format(time.RFC3339Nano)))
		}
		if k.attempt < 2 {
			continue
		}
		r.Retries++
		prev, ok := starts[cronKey{k.sched, k.attempt - 1}]
		explained := ok && lost(prev, e)
		if !ok {
			// The host died after its claim and before the command
			// wrote its first line.
			for _, f := range faults {
				if f.overlaps(e.At.Add(-c.LostWithin), e.At) && (f.Kind.outage() || f.Kind == DaemonKill || f.Kind == DaemonStop || f.Kind.IsNet()) {
					explained = true
				}
			}
		}
		if ok && e.Fencing <= prev.Fencing {
			r.FencingReused++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s attempt %d got fencing token %d, not above attempt %d's %d", c.Task, e.ScheduledAt.Format(time.RFC3339), k.attempt, e.Fencing, k.attempt-1, prev.Fencing))
		}
		if end, ended := ends[cronKey{k.sched, k.attempt - 1}]; ended && end.After(e.At) {
			// The previous attempt's command was still running: a host
			// that lost its run lease must stop its command first.
			r.Overlaps++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s attempt %d started on %s at %s while attempt %d still ran on %s (it ended %s)", c.Task, e.ScheduledAt.Format(time.RFC3339), k.attempt, e.Host, e.At.Format("15:04:05.000"), k.attempt-1, prev.Host, end.Format("15:04:05.000")))
		}
		if !explained {
			r.UnexplainedRetries++
			prevDesc := "no earlier attempt logged"
			if ok {
				prevDesc = fmt.Sprintf("attempt %d on %s started %s", k.attempt-1, prev.Host, prev.At.Format("15:04:05.000"))
			}
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s attempt %d on %s started %s: no loss of the previous attempt's host explains it (%s)", c.Task, e.ScheduledAt.Format(time.RFC3339), k.attempt, e.Host, e.At.Format("15:04:05.000"), prevDesc))
		}
	}
	if c.Forbid {
		forbidOverlaps(c, starts, ends, lost, &r)
	}
	countMisses(c, first, starts, ends, &r)
	return r
}

// cronKey is one attempt of one scheduled time.
type cronKey struct {
	sched   int64
	attempt int
}

// forbidOverlaps counts, under overlap forbid, the starts made while a run
// of another scheduled time still ran, unless that run's host was lost
// (it could not stop it).
func forbidOverlaps(c CronCheck, starts map[cronKey]CronEvent, ends map[cronKey]time.Time, lost func(prev, e CronEvent) bool, r *CronReport) {
	for k, e := range starts {
		for pk, p := range starts {
			end, ended := ends[pk]
			if pk.sched == k.sched || !ended || !p.At.Before(e.At) || !end.After(e.At) || lost(p, e) {
				continue
			}
			r.Overlaps++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: overlap forbid: %s attempt %d started on %s at %s while %s attempt %d still ran on %s (it ended %s)", c.Task, e.ScheduledAt.Format(time.RFC3339), k.attempt, e.Host, e.At.Format("15:04:05.000"), p.ScheduledAt.Format(time.RFC3339), pk.attempt, p.Host, end.Format("15:04:05.000")))
		}
	}
}

// countMisses counts the scheduled times from first to c.Until that never
// started, and under overlap forbid the ones skipped behind a run known to
// run (Skips): one that ended, so whose host lived, after running for at
// least the time since its own scheduled time.
func countMisses(c CronCheck, first time.Time, starts map[cronKey]CronEvent, ends map[cronKey]time.Time, r *CronReport) {
	started := map[int64]bool{}
	for k := range starts {
		started[k.sched] = true
	}
	knownRunning := func(t time.Time) bool {
		for k, p := range starts {
			end, ended := ends[k]
			if ended && p.ScheduledAt.Before(t) && end.Sub(p.At)+skipSlack >= t.Sub(p.ScheduledAt) {
				return true
			}
		}
		return false
	}
	for t := first; !t.After(c.Until); t = t.Add(c.Step) {
		r.Occurrences++
		switch {
		case started[t.UnixNano()]:
		case c.Forbid && knownRunning(t):
			r.Skips++
		default:
			r.Misses++
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s: never started", c.Task, t.Format(time.RFC3339)))
		}
	}
}

// Pushed is a payload whose push was acknowledged, and when the push ran.
type Pushed struct {
	Payload  string
	From, To time.Time
}

// QueueReport is the verdict on the queue's jobs.
type QueueReport struct {
	Pushed int
	Lost   int // pushed, never done
	// LostToFailover counts jobs pushed, never done, whose push was
	// acknowledged by a primary whose replica, promoted, missed it;
	// RerunAfterLostWrite (job, attempt) pairs started again because the
	// claim that counted the attempt was lost: so, or in a PostgreSQL
	// crash before its WAL was flushed (lostClaim).
	LostToFailover, RerunAfterLostWrite int
	// Redeliveries counts starts of a payload after its first; each must be
	// explained by the previous delivery's lease running out: its worker
	// killed or cut off its backend by a network fault, a backend restart
	// while it ran, or a push that was retried after an error (which may
	// have enqueued it twice).
	Redeliveries            int
	UnexplainedRedeliveries int
	// DuplicateAttempts counts (job id, attempt) pairs that started twice.
	DuplicateAttempts int
	Problems          []string
}

// CheckQueue checks that every pushed payload was handled to the end and
// that every second delivery is explained. ambiguous holds payloads whose
// push returned an error at least once. As with CheckCron, a backend
// outage counts from lease (the visibility timeout) before the previous
// delivery's start, where its claim may have hung.
func CheckQueue(events []JobEvent, pushed []Pushed, ambiguous map[string]bool, faults []Fault, lease time.Duration) QueueReport {
	r := QueueReport{Pushed: len(pushed)}
	done := map[string]bool{}
	starts := map[string][]JobEvent{}
	seen := map[string]time.Time{}
	for _, e := range events {
		switch e.Kind {
		case "done":
			done[e.Payload] = true
		case "start":
			k := e.JobID + "#" + strconv.Itoa(e.Attempt)
			if first, dup := seen[k]; dup && (lostWrite(faults, first.Add(-time.Second), first) || lostClaim(faults, first)) {
				// The claim that counted this attempt was a write the
				// promoted replica never had, or one a PostgreSQL crash
				// lost.
				r.RerunAfterLostWrite++
			} else if dup {
				r.DuplicateAttempts++
				r.Problems = append(r.Problems, fmt.Sprintf("job %s attempt %d started twice", e.JobID, e.Attempt))
			} else {
				seen[k] = e.At
			}
			starts[e.Payload] = append(starts[e.Payload], e)
		}
	}
	for _, p := range pushed {
		switch {
		case done[p.Payload]:
		case lostWrite(faults, p.From, p.To):
			r.LostToFailover++
		default:
			r.Lost++
			r.Problems = append(r.Problems, fmt.Sprintf("job %s was pushed and never done", p.Payload))
		}
	}
	payloads := make([]string, 0, len(starts))
	for p := range starts {
		payloads = append(payloads, p)
	}
	sort.Strings(payloads)
	for _, p := range payloads {
		ss := starts[p]
		sort.Slice(ss, func(i, j int) bool { return ss[i].At.Before(ss[j].At) })
		for i := 1; i < len(ss); i++ {
			r.Redeliveries++
			prev, cur := ss[i-1], ss[i]
			explained := ambiguous[p] && prev.JobID != cur.JobID
			for _, f := range faults {
				if (f.Kind.outage() && f.overlaps(prev.At.Add(-lease), cur.At)) || (f.Kind == WorkerKill && f.Target == prev.Worker && f.overlaps(prev.At, cur.At)) ||
					(f.cuts(prev.Worker) && f.overlaps(prev.At.Add(-lease), cur.At)) {
					explained = true
				}
			}
			if !explained {
				r.UnexplainedRedeliveries++
				r.Problems = append(r.Problems, fmt.Sprintf("job %s (%s) ran again on %s after %s without its lease running out (attempt %d started %s, attempt %d started %s)",
					p, cur.JobID, cur.Worker, prev.Worker, prev.Attempt, prev.At.Format("15:04:05.000"), cur.Attempt, cur.At.Format("15:04:05.000")))
			}
		}
	}
	return r
}

// FenceEvent is one line of the fencing evidence.
type FenceEvent struct {
	Kind    string // start or end
	Slot    int
	Token   int64
	Highest int64 // the highest token the resource had seen for the slot
	Holder  string
}

// ReadFencing parses the fencing evidence.
func ReadFencing(path string) ([]FenceEvent, error) {
	lines, err := readLines(path, 5)
	if err != nil {
		return nil, err
	}
	out := make([]FenceEvent, 0, len(lines))
	for _, fs := range lines {
		e := FenceEvent{Kind: fs[0], Holder: fs[4]}
		var errs [3]error
		e.Slot, errs[0] = strconv.Atoi(fs[1])
		e.Token, errs[1] = strconv.ParseInt(fs[2], 10, 64)
		e.Highest, errs[2] = strconv.ParseInt(fs[3], 10, 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%s: line %q: %w", path, strings.Join(fs, " "), err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// CheckFencing lists what the protected resource would refuse: a holder
// of a slot whose token is not above every token the resource saw for
// that slot before it (a stale holder, or a token given twice), and a
// holder still running when a newer holder of its slot reached the
// resource (two holders of one slot at once). A holder counts once.
func CheckFencing(events []FenceEvent) (stale int, problems []string) {
	counted := map[string]bool{}
	for _, e := range events {
		switch {
		case counted[e.Holder]:
			if e.Kind == "end" { // pids are reused in a long run
				delete(counted, e.Holder)
			}
		case e.Kind == "start" && e.Token <= e.Highest:
			counted[e.Holder] = true
			stale++
			problems = append(problems, fmt.Sprintf("a holder of slot %d started with fencing token %d after the resource had seen %d", e.Slot, e.Token, e.Highest))
		case e.Kind == "end" && e.Highest > e.Token:
			counted[e.Holder] = true
			stale++
			problems = append(problems, fmt.Sprintf("the holder of slot %d with fencing token %d still ran when token %d reached the resource", e.Slot, e.Token, e.Highest))
		}
	}
	return stale, problems
}
