package chaos

import (
	"fmt"
	"time"
)

// verdict reads the evidence and lists every violation.
func (w *world) verdict(faultEnd time.Time) Result {
	t := w.t
	r := Result{Backend: w.cfg.Backend, Scenario: "cron+sem+queue", Seed: w.cfg.Seed, Faults: w.faults, Limit: semLimit, Respawns: w.respawns}
	switch {
	case w.cfg.Backend == "memcached":
		r.Scenario = "sem on memcached; cron+queue on sqlite"
	case w.sentinels != nil:
		r.Scenario = "cron+sem+queue; primary, replica, 3 sentinels"
	}
	cron, err := ReadCron(w.path("cron.log"))
	if err != nil {
		t.Fatal(err)
	}
	r.Cron = CheckCron(cron, tickCheck(faultEnd), w.faults)
	r.Defaults = CheckCron(cron, defaultsCheck(faultEnd), w.faults)
	if r.SemEntries, r.MaxHolders, err = ReadPeaks(w.path("peaks")); err != nil {
		t.Fatal(err)
	}
	fence, err := ReadFencing(w.path("fencing"))
	if err != nil {
		t.Fatal(err)
	}
	var fenceProblems []string
	r.StaleFencing, fenceProblems = CheckFencing(fence)
	jobs, err := ReadJobs(w.path("queue.log"))
	if err != nil {
		t.Fatal(err)
	}
	w.pushMu.Lock()
	r.Queue = CheckQueue(jobs, w.pushed, w.ambiguous, w.faults, visibilityTimeout)
	w.pushMu.Unlock()

	v := append(append(append(append([]string{}, r.Cron.Problems...), r.Defaults.Problems...), r.Queue.Problems...), fenceProblems...)
	if r.MaxHolders > r.Limit {
		v = append(v, fmt.Sprintf("semaphore pool had %d holders alive at once (limit %d)", r.MaxHolders, r.Limit))
	}
	if r.SemEntries == 0 {
		v = append(v, "no semaphore holder ever ran")
	}
	if r.Queue.Pushed == 0 {
		v = append(v, "no job was pushed")
	}
	if _, mid := r.Count(""); mid == 0 {
		v = append(v, "no fault hit an operation in flight")
	}
	if n, _ := r.Count(DaemonKill); n < w.cfg.MinDaemonKills {
		v = append(v, fmt.Sprintf("%d daemon kills, below the floor of %d", n, w.cfg.MinDaemonKills))
	}
	if n, _ := r.Count(BackendRestart); n < w.cfg.MinBackendRestarts && w.srv != nil {
		v = append(v, fmt.Sprintf("%d backend restarts, below the floor of %d", n, w.cfg.MinBackendRestarts))
	}
	if n, _ := r.Count(SentinelFailover); w.sentinels != nil && n < max(1, w.cfg.MinBackendRestarts) {
		v = append(v, fmt.Sprintf("%d sentinel failovers, below the floor of %d", n, max(1, w.cfg.MinBackendRestarts)))
	}
	if n, _ := r.Count(RedisFailover); w.stale != nil && n == 0 {
		v = append(v, "no redis-failover fault was injected")
	}
	if w.net != nil {
		for _, k := range NetKinds {
			if n, _ := r.Count(k); n == 0 {
				v = append(v, fmt.Sprintf("no %s fault was injected", k))
			}
		}
	}
	r.Violations = v
	return r
}

// tickCheck is what the overlap allow task is checked against.
func tickCheck(until time.Time) CronCheck {
	return CronCheck{Task: "tick", Step: cronStep, Until: until, Lease: runLease, LostWithin: 20 * time.Second}
}

// defaultsCheck is what the task with the defaults is checked against.
func defaultsCheck(until time.Time) CronCheck {
	return CronCheck{Task: defaultsTask, Step: cronStep, Until: until, Lease: defaultsRunLease, LostWithin: defaultsLostWithin, Forbid: true}
}
