package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/coordd/coordd/internal/netfault"
)

// The network between the processes and a networked backend: every
// daemon, sem run, worker (and the harness's own commands) connects
// through one proxy, so all of them read one spec, and a fault strikes
// the connections of one member only: the proxy tells members apart by
// the process that opened each connection.
type network struct {
	proxy *netfault.Proxy

	mu   sync.Mutex
	pids map[int]string // process -> member id

	// active: the network fault in force per member id, as an index into
	// world.faults.
	active map[string]int
}

// startNetwork puts a proxy in front of the server at upstream and returns
// the address clients should use.
func (w *world) startNetwork(upstream string) string {
	n := &network{pids: map[int]string{}, active: map[string]int{}}
	p, err := netfault.Listen("127.0.0.1:0", upstream, n.owner)
	if err != nil {
		w.t.Fatalf("chaos: proxy: %v", err)
	}
	n.proxy = p
	w.net = n
	w.t.Cleanup(func() { p.Close() })
	return p.Addr()
}

// owner names the member whose process opened c, or "" (the harness's
// own commands, a process gone already).
func (n *network) owner(c net.Conn) string {
	n.mu.Lock()
	pids := make([]int, 0, len(n.pids))
	for pid := range n.pids {
		pids = append(pids, pid)
	}
	n.mu.Unlock()
	pid, ok := netfault.SocketOwner(c, pids)
	if !ok {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pids[pid]
}

// started records m's new process (forgetting its previous one).
func (n *network) started(m *member, oldPID int) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pids, oldPID)
	n.pids[m.proc.Cmd.Process.Pid] = m.id
}

// netTargets are the members a network fault may strike: those that talk
// to the faulty backend (on memcached, the queue workers do not).
func (w *world) netTargets() []*member {
	ms := append([]*member{}, w.daemons...)
	ms = append(ms, w.clients...)
	if w.cfg.Backend != "memcached" {
		ms = append(ms, w.workers...)
	}
	return ms
}

// injectNet starts a network fault of kind k on one member, busy ones
// preferred, none already under one; false when none is eligible.
func (w *world) injectNet(f *Fault, open InFlight) bool {
	if w.net == nil {
		return false
	}
	busy := func(m *member) bool {
		return open.CronHosts[m.id] > 0 || open.SemClients[m.tag] || open.Workers[m.tag] > 0
	}
	var free, hot []*member
	for _, m := range w.netTargets() {
		if _, on := w.net.active[m.id]; on || m.stopped > 0 {
			continue
		}
		free = append(free, m)
		if m.proc.Running() && busy(m) {
			hot = append(hot, m)
		}
	}
	var m *member
	switch {
	case len(hot) > 0 && w.rng.IntN(4) != 0:
		m = hot[w.rng.IntN(len(hot))]
	case len(free) > 0:
		m = free[w.rng.IntN(len(free))]
	default:
		return false
	}
	f.Target, f.MidOp = m.id, busy(m)
	// Long enough, at the top of the range, to outlast a lease (3 s).
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(w.rng.Int64N(int64(hi-lo))) }
	var nf netfault.Fault
	var d time.Duration
	switch f.Kind {
	case NetBlackhole:
		nf, d = netfault.Fault{Kind: netfault.Blackhole}, between(time.Second, 7*time.Second)
	case NetLatency:
		nf, d = netfault.Fault{Kind: netfault.Latency, Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond}, between(3*time.Second, 8*time.Second)
	case NetSlow:
		rate := 2000 + w.rng.IntN(6000)
		nf, d = netfault.Fault{Kind: netfault.Slow, BytesPerSec: rate}, between(3*time.Second, 8*time.Second)
		f.Detail = fmt.Sprintf("%d B/s", rate)
	case NetReset:
		nf, d = netfault.Fault{Kind: netfault.Reset}, between(200*time.Millisecond, 1500*time.Millisecond)
	case NetOneWay:
		nf, d = netfault.Fault{Kind: netfault.LoseUp}, between(time.Second, 7*time.Second)
		f.Detail = "requests lost"
		if w.rng.IntN(2) == 0 {
			nf.Kind, f.Detail = netfault.LoseDown, "replies lost"
		}
	}
	w.net.proxy.Set(m.id, nf)
	w.net.active[m.id] = len(w.faults)
	f.End = time.Now().Add(d)
	return true
}

// healNet ends the network faults whose time is up (all of them with
// all).
func (w *world) healNet(now time.Time, all bool) {
	if w.net == nil {
		return
	}
	for id, i := range w.net.active {
		if all || !now.Before(w.faults[i].End) {
			w.net.proxy.Set(id, netfault.Fault{})
			w.faults[i].End = now
			delete(w.net.active, id)
		}
	}
}
