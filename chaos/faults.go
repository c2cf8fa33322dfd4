package chaos

import (
	"syscall"
	"time"
)

type planned struct {
	at    time.Duration
	kind  FaultKind
	floor bool // placed to meet a floor
}

// schedule draws the faults from the seed: one every 1.5-3.5 s, of a kind
// drawn by weight, then raised to the floors.
func (w *world) schedule() []planned {
	weights := []struct {
		k FaultKind
		w int
	}{{DaemonKill, 30}, {DaemonStop, 10}, {ClientKill, 20}, {WorkerKill, 20}}
	outage := BackendRestart
	switch {
	case w.sentinels != nil:
		outage = SentinelFailover
	case w.stale != nil:
		outage = RedisFailover
	}
	weights = append(weights, struct {
		k FaultKind
		w int
	}{outage, 12})
	if w.net != nil {
		for _, k := range NetKinds {
			weights = append(weights, struct {
				k FaultKind
				w int
			}{k, 8})
		}
	}
	total := 0
	for _, x := range weights {
		total += x.w
	}
	var plan []planned
	for at := time.Duration(0); ; {
		at += 1500*time.Millisecond + time.Duration(w.rng.Int64N(int64(2*time.Second)))
		if at >= w.cfg.Duration-time.Second {
			break
		}
		n := w.rng.IntN(total)
		for _, x := range weights {
			if n < x.w {
				plan = append(plan, planned{at: at, kind: x.k})
				break
			}
			n -= x.w
		}
	}
	// raise keeps floor faults of kind k: it marks existing ones as kept
	// and turns drawn faults that nothing keeps into more.
	raise := func(k FaultKind, floor int) {
		have := 0
		for i := range plan {
			if plan[i].kind == k && have < floor {
				plan[i].floor = true
				have++
			}
		}
		for ; have < floor; have++ {
			var idx []int
			for i, p := range plan {
				if !p.floor {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				w.t.Fatalf("chaos: %s is too short for the fault floors", w.cfg.Duration)
			}
			i := idx[w.rng.IntN(len(idx))]
			plan[i].kind, plan[i].floor = k, true
		}
	}
	// Every kind at least once, then the floors.
	for _, k := range []FaultKind{DaemonStop, ClientKill, WorkerKill} {
		raise(k, 1)
	}
	if w.net != nil {
		for _, k := range NetKinds {
			raise(k, 1)
		}
	}
	raise(outage, max(1, w.cfg.MinBackendRestarts))
	raise(DaemonKill, w.cfg.MinDaemonKills)
	return plan
}

// inject applies one fault; false means no target is eligible now and the
// fault should be tried again shortly.
func (w *world) inject(k FaultKind) bool {
	f := Fault{Kind: k, At: time.Now()}
	open := w.inFlight()
	switch k {
	case DaemonKill:
		m := w.pickDaemon(false)
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.id, open.CronHosts[m.id] > 0
		m.proc.Kill9()
		m.killed, m.respawn = true, time.Now().Add(500*time.Millisecond+time.Duration(w.rng.Int64N(int64(2500*time.Millisecond))))
		if m.stopped > 0 { // killed while stopped: the stop ends here
			w.faults[m.stopped-1].End = time.Now()
			m.stopped = 0
		}
	case DaemonStop:
		m := w.pickDaemon(true)
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.id, open.CronHosts[m.id] > 0
		m.proc.Signal(syscall.SIGSTOP)
		// Longer than the leader lease and the run lease together, so
		// that the host is certainly lost while it sleeps.
		m.stopped = len(w.faults) + 1
		m.contAt = time.Now().Add(leaderLease + runLease + time.Second + time.Duration(w.rng.Int64N(int64(3*time.Second))))
		f.End = m.contAt
	case ClientKill:
		m := w.pickBusy(w.clients, func(m *member) bool { return open.SemClients[m.tag] })
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.tag, open.SemClients[m.tag]
		m.proc.Kill9()
		m.killed = true
	case WorkerKill:
		m := w.pickBusy(w.workers, func(m *member) bool { return open.Workers[m.tag] > 0 })
		if m == nil {
			return false
		}
		f.Target, f.MidOp = m.tag, open.Workers[m.tag] > 0
		m.proc.Kill9()
		m.killed, m.respawn = true, time.Now().Add(500*time.Millisecond+time.Duration(w.rng.Int64N(int64(1500*time.Millisecond))))
	case BackendRestart:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		w.srv.Kill()
		time.Sleep(500*time.Millisecond + time.Duration(w.rng.Int64N(int64(1500*time.Millisecond))))
		w.srv.Start(w.t)
	case NetBlackhole, NetLatency, NetSlow, NetReset, NetOneWay:
		if !w.injectNet(&f, open) {
			return false
		}
	case SentinelFailover:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		w.sentinels.failover(w.t)
	case RedisFailover:
		f.Target, f.MidOp = w.cfg.Backend, open.Any()
		f.End = w.stale.run(w)
	}
	if f.End.IsZero() {
		f.End = time.Now()
	}
	w.faults = append(w.faults, f)
	w.t.Logf("fault %-15s %-8s mid-operation=%-5v %s - %s %s", f.Kind, f.Target, f.MidOp, f.At.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Detail)
	return true
}

// pickDaemon picks a running daemon, the leader half of the time. For a
// stop it must not be stopped already, and no other daemon may be stopped.
func (w *world) pickDaemon(forStop bool) *member {
	var up []*member
	for _, m := range w.daemons {
		if !m.proc.Running() {
			continue
		}
		if forStop && m.stopped > 0 {
			return nil
		}
		up = append(up, m)
	}
	if len(up) == 0 {
		return nil
	}
	if w.rng.IntN(2) == 0 {
		if l := w.leader(); l != "" {
			for _, m := range up {
				if m.id == l && (!forStop || m.stopped == 0) {
					return m
				}
			}
		}
	}
	return up[w.rng.IntN(len(up))]
}

// pickBusy picks a running member, preferring one that is in the middle of
// its work.
func (w *world) pickBusy(ms []*member, busy func(*member) bool) *member {
	var up, b []*member
	for _, m := range ms {
		if m.proc.Running() {
			up = append(up, m)
			if busy(m) {
				b = append(b, m)
			}
		}
	}
	if len(b) > 0 && w.rng.IntN(4) != 0 {
		return b[w.rng.IntN(len(b))]
	}
	if len(up) == 0 {
		return nil
	}
	return up[w.rng.IntN(len(up))]
}

// inFlight reads what is in flight now, counting only starts made by the
// current incarnation of each daemon (an earlier one's killed command
// never wrote its end).
func (w *world) inFlight() InFlight {
	cron, _ := ReadCron(w.path("cron.log"))
	sem, _ := ReadSem(w.path("sem.log"))
	jobs, _ := ReadJobs(w.path("queue.log"))
	since := map[string]time.Time{}
	for _, m := range w.daemons {
		since[m.id] = m.started
	}
	live := cron[:0]
	for _, e := range cron {
		if !e.At.Before(since[e.Host]) {
			live = append(live, e)
		}
	}
	return OpenOps(live, sem, jobs)
}

// heal ends every fault: stopped daemons continue, killed ones start, the
// backend runs.
func (w *world) heal() {
	w.healNet(time.Now(), true)
	if w.srv != nil && !w.srv.Running() {
		w.srv.Start(w.t)
	}
	for _, m := range w.daemons {
		m.contAt, m.respawn = time.Time{}, time.Time{}
	}
	for _, m := range w.workers {
		m.respawn = time.Time{}
	}
	w.tend()
}
