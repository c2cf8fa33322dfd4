package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coordd/coordd/backends"
)

// Two daemons with one host id would overwrite each other's host record
// and share one identity in holder records and logs, so coordd refuses or
// reports it:
//
//   - On one machine, LockHostID takes an exclusive flock on a file in the
//     data directory named after the host id; a second `coordd run` with
//     the same id and data directory refuses to start. The kernel drops
//     the lock when its process dies, even by kill -9, so a restart after
//     a crash is never refused.
//   - Across machines (a cloned image, a copied --host-id), the heartbeat
//     notices: before each heartbeat the daemon reads its record, and a
//     record that another run id rewrote since this daemon's last
//     heartbeat proves a second live daemon. That is logged at error on
//     every heartbeat while it lasts and exported as
//     coordd_host_id_conflict. A live record of another run id found at
//     start is only a warning: it may be this host's previous incarnation,
//     killed before it could mark itself stopped.

// ErrHostIDInUse: another daemon on this machine runs with the same host
// id.
var ErrHostIDInUse = errors.New("host id in use")

// LockHostID takes this machine's lock for hostID in dataDir. It returns
// ErrHostIDInUse (naming the holder's pid) when another live process holds
// it. unlock releases it; the lock also ends with the process.
func LockHostID(dataDir, hostID string) (unlock func(), err error) {
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("host id lock: %w", err)
	}
	path := filepath.Join(dataDir, "run-"+lockFileName(hostID)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host id lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("another coordd run with host id %q runs on this machine (%s, lock %s): %w", hostID, holder, path, ErrHostIDInUse)
		}
		return nil, fmt.Errorf("host id lock %s: %w", path, err)
	}
	// The pid is for the message above only; the flock is the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// lockFileName keeps a host id usable as a file name whatever it holds:
// bytes outside [A-Za-z0-9._-] become %XX.
func lockFileName(hostID string) string {
	var b strings.Builder
	for i := 0; i < len(hostID); i++ {
		c := hostID[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// hostGuard is what the daemon knows of its own host record between two
// heartbeats. Only hostLoop uses it.
type hostGuard struct {
	// beaten: this daemon has written its record at least once.
	beaten bool
	// conflict is the other run id that last rewrote this host's record,
	// "" when none did.
	conflict string
}

// checkHostRecord reads this host's record before a heartbeat and reports
// another daemon using the same host id (see above). A failed read is
// left to the heartbeat's own error reporting.
func (d *Daemon) checkHostRecord(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, d.heartbeatTimeout())
	defer cancel()
	hs, err := d.hosts.ListHosts(rctx)
	if err != nil {
		return
	}
	var rec *backends.HostRecord
	for i := range hs.Hosts {
		if hs.Hosts[i].Host == d.cfg.HostID {
			rec = &hs.Hosts[i]
			break
		}
	}
	g := &d.guard
	own := d.elector.Holder()
	foreign := rec != nil && rec.RunID != own && !rec.Stopped
	switch {
	case foreign && g.beaten:
		// This daemon wrote the record at its last heartbeat; another run
		// id wrote it since: two daemons are alive with one id.
		if g.conflict == "" {
			d.metrics.HostIDConflict(true)
		}
		g.conflict = rec.RunID
		d.log.Error("another daemon runs with this host id: both rewrite one host record; give each server its own --host-id",
			"host", d.cfg.HostID, "other_run", rec.RunID, "other_pid", rec.PID, "other_version", rec.Version,
			"other_seen_ago", hs.Now.Sub(rec.LastSeen).Round(time.Millisecond))
	case foreign && rec.State(hs.Now) == backends.HostLive:
		d.log.Warn("this host id has a live record of another daemon: if it still runs, two daemons share this host id (checked again at every heartbeat)",
			"host", d.cfg.HostID, "other_run", rec.RunID, "other_pid", rec.PID,
			"other_seen_ago", hs.Now.Sub(rec.LastSeen).Round(time.Millisecond))
	case g.conflict != "" && !foreign:
		g.conflict = ""
		d.metrics.HostIDConflict(false)
		d.log.Info("no other daemon rewrote this host's record since the last heartbeat", "host", d.cfg.HostID)
	}
}
