package chaos

import (
	"fmt"
	"strings"
	"syscall"
	"time"
)

// start starts m's next incarnation; envVar, when set, names the
// variable that tells the commands it runs the incarnation's tag.
func (w *world) start(m *member, envVar string, args ...string) {
	old := 0
	if m.proc != nil {
		old = m.proc.Cmd.Process.Pid
	}
	m.gen++
	m.tag = fmt.Sprintf("%s-%d", m.id, m.gen)
	env := []string{"COORDD_TEST_HOST=" + m.id}
	if envVar != "" {
		env = append(env, envVar+"="+m.tag)
	}
	m.proc = w.env.StartWith(w.t, m.tag, env, args...)
	w.net.started(m, old)
	m.started = time.Now()
	m.killed, m.respawn = false, time.Time{}
}

func (w *world) startDaemon(m *member) {
	w.start(m, "", "run", "-f", w.spec, "--host-id", m.id,
		"--resync", "2s", "--shutdown-grace", "5s", "--log-level", "info")
}

func (w *world) startWorker(m *member) {
	w.start(m, "COORDD_CHAOS_WORKER",
		"queue", "work", "jobs", "-f", w.spec, "--concurrency", workerConcurrency, "--host-id", m.id, "--", "/bin/sh", w.path("handle.sh"))
}

func (w *world) startClient(m *member) {
	w.start(m, "COORDD_CHAOS_CLIENT",
		"sem", "run", "pool", "-f", w.spec, "--host-id", m.id, "--", "/bin/sh", w.path("hold.sh"))
}

// tend keeps the cluster going: it respawns what the harness killed once
// its downtime is over, continues stopped daemons, starts the next sem run
// of each client, and respawns daemons and workers that exited on their
// own.
func (w *world) tend() {
	now := time.Now()
	w.healNet(now, false)
	for _, m := range w.daemons {
		if m.stopped > 0 && !now.Before(m.contAt) {
			m.proc.Signal(syscall.SIGCONT)
			w.faults[m.stopped-1].End = time.Now()
			m.stopped = 0
		}
		if w.exited(m, now) {
			w.startDaemon(m)
		}
	}
	for _, m := range w.workers {
		if w.exited(m, now) {
			w.startWorker(m)
		}
	}
	for _, m := range w.clients {
		select {
		case <-m.proc.Done():
		default:
			continue
		}
		if m.respawn.IsZero() {
			// A sem run that failed (its backend restarting) is retried
			// after a pause, not in a tight loop.
			m.respawn = now
			if m.proc.ExitCode() != 0 && !m.killed {
				m.respawn = now.Add(300 * time.Millisecond)
			}
		}
		if w.clientsOn && !now.Before(m.respawn) {
			w.startClient(m)
		}
	}
}

// exited reports whether m should be started again: killed by the harness
// and its downtime over, or exited on its own (counted, with its output).
func (w *world) exited(m *member, now time.Time) bool {
	select {
	case <-m.proc.Done():
	default:
		return false
	}
	if m.killed {
		return !now.Before(m.respawn)
	}
	w.respawns++
	w.t.Logf("%s exited by itself with %d; starting it again. Last output:\n%s", m.tag, m.proc.ExitCode(), tail(m.proc.Output(), 15))
	return true
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
