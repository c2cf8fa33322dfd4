package daemon

import (
	"sort"

	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/notify"
)

// newNotifier builds the delivery of on_failure hooks: the leader's, over
// the spec of the moment, marked in the cluster backend.
func (d *Daemon) newNotifier() *notify.Notifier {
	del := &notify.Deliverer{
		UserAgent: "coordd/" + d.cfg.Version,
		Unset:     func() []string { return d.Spec().ChildEnvUnset() },
		Shim:      child.DefaultShim,
	}
	return notify.New(notify.Config{
		Host:    d.cfg.HostID,
		Notices: d.hosts,
		Objects: d.hookObjects,
		Leading: func() bool {
			_, ok := d.elector.Leading()
			return ok
		},
		Deliver:  del.Deliver,
		Every:    d.cfg.NotifyEvery,
		Log:      d.log.Named("notify"),
		Observer: d.metrics,
	})
}

// hookObjects lists the cron tasks and queues of the last good spec that
// have an on_failure hook, on their open backends, by address.
func (d *Daemon) hookObjects() []notify.Object {
	s, e := d.current()
	var out []notify.Object
	for _, t := range s.Cron {
		if b := e.Backends[t.Backend]; t.OnFailure != nil && b != nil {
			out = append(out, notify.Object{Task: t, Backend: b})
		}
	}
	for _, q := range s.Queues {
		if b := e.Backends[q.Backend]; q.OnFailure != nil && b != nil {
			out = append(out, notify.Object{Queue: q, Backend: b})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address() < out[j].Address() })
	return out
}
