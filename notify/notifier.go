package notify

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/repeatlog"
	"github.com/coordd/coordd/spec"
)

// Object is one cron task or queue with an on_failure hook, and the
// backend that holds it.
type Object struct {
	Task    *spec.CronTask
	Queue   *spec.Queue
	Backend backends.Backend
}

func (o Object) hook() *spec.Hook {
	if o.Task != nil {
		return o.Task.OnFailure
	}
	return o.Queue.OnFailure
}

// Address is "cron.NAME" or "queue.NAME".
func (o Object) Address() string {
	if o.Task != nil {
		return "cron." + o.Task.Name
	}
	return "queue." + o.Queue.Name
}

// Observer counts deliveries (metrics).
type Observer interface {
	// HookDelivered is called once per event whose delivery ended; ok is
	// false when the hook failed (after its retries).
	HookDelivered(object, kind string, ok bool)
}

// Config configures a Notifier.
type Config struct {
	// Host is this daemon's host id (Event.Notifier).
	Host string
	// Notices is the cluster backend's record of notified events.
	Notices backends.Notices
	// Objects lists the objects with hooks in the spec of the moment.
	Objects func() []Object
	// Leading reports whether this host leads: only the leader looks for
	// events.
	Leading func() bool
	// Deliver runs a hook; nil: a Deliverer with its defaults.
	Deliver func(ctx context.Context, h *spec.Hook, ev Event) error
	// Every is the time between two looks; zero: 5 s.
	Every time.Duration
	// Parallel bounds the deliveries in flight; zero: 4.
	Parallel int
	Log      hclog.Logger
	Observer Observer
}

// historyDepth is how many of an object's newest runs or dead jobs each
// look reads: more events than this between two looks (5 s) at one
// object are not all notified.
const historyDepth = 20

// Notifier delivers each failure event to its object's hook once across
// the cluster. The leader looks for events every 5 s in the
// stores' own records (a task's history and next time, a queue's dead
// set), skips those the cluster backend has marked notified, delivers the
// others, and marks each once its delivery ended, whether the hook
// succeeded or not. A leader that dies between a delivery and its mark
// leaves the event unmarked, and the next leader delivers it again: at
// least once, with the same event id, which receivers drop duplicates by.
// An event is looked for while it is younger than half of
// backends.NoticeRetention, and never when it happened before its hook was
// declared.
type Notifier struct {
	cfg Config
	log *repeatlog.Limiter

	mu       sync.Mutex
	inFlight map[string]bool      // events being delivered
	done     map[string]time.Time // events known marked -> their At
	unmarked map[string]time.Time // delivered, the mark not written yet
	since    map[string]time.Time // HookDeclared id -> its time
	pending  []delivery           // events waiting for a delivery slot
	workers  int                  // goroutines delivering (at most Parallel)
	wg       sync.WaitGroup       // the delivering goroutines
	// dctx is the deliveries' context: a shutdown lets them finish
	// within its grace (Wait), then cancels them.
	dctx   context.Context
	cancel context.CancelFunc
}

// New returns a Notifier; Run starts it.
func New(cfg Config) *Notifier {
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Deliver == nil {
		cfg.Deliver = (&Deliverer{}).Deliver
	}
	dctx, cancel := context.WithCancel(context.Background())
	return &Notifier{
		dctx: dctx, cancel: cancel,
		cfg: cfg, log: repeatlog.New(cfg.Log, time.Minute),
		inFlight: map[string]bool{}, done: map[string]time.Time{}, unmarked: map[string]time.Time{}, since: map[string]time.Time{},
	}
}

// Run looks for events until ctx ends. Deliveries in flight go on: Wait
// ends them.
func (n *Notifier) Run(ctx context.Context) {
	t := time.NewTicker(n.cfg.Every)
	defer t.Stop()
	for {
		if n.cfg.Leading() {
			n.Look(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Wait waits for the deliveries in flight until ctx ends, then cancels
// them: an event whose delivery was cut is not marked, and the next
// leader delivers it again.
func (n *Notifier) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		n.cancel()
		<-done
	}
}

// Look makes one look: it marks what was delivered, reads every object's
// events and starts the delivery of those not yet notified.
func (n *Notifier) Look(ctx context.Context) {
	n.markDelivered(ctx)
	n.forget(time.Now().Add(-forgetAfter))
	for _, o := range n.cfg.Objects() {
		if ctx.Err() != nil || !n.cfg.Leading() {
			return
		}
		n.lookAt(ctx, o)
	}
}

// lookAt reads one object's events and delivers the new ones.
func (n *Notifier) lookAt(ctx context.Context, o Object) {
	key := "notify " + o.Address()
	now, err := o.Backend.Now(ctx)
	if err != nil {
		n.log.Warn(key, "notify: reading the backend's clock failed", "object", o.Address(), "error", err)
		return
	}
	horizon := now.Add(-backends.NoticeRetention / 2)
	since, err := n.declaredSince(ctx, o)
	if err != nil {
		n.log.Warn(key, "notify: recording when the hook was declared failed", "object", o.Address(), "error", err)
		return
	}
	evs, err := collect(ctx, o.Backend, o, now, historyDepth)
	if err != nil {
		n.log.Warn(key, "notify: reading failure events failed", "object", o.Address(), "error", err)
		return
	}
	n.log.Recovered(key, "notify: reading failure events works again", "object", o.Address())
	var fresh []Event
	n.mu.Lock()
	for _, ev := range evs {
		if ev.At.Before(since) || ev.At.Before(horizon) {
			continue
		}
		if _, ok := n.done[ev.ID]; ok || n.inFlight[ev.ID] {
			continue
		}
		if _, ok := n.unmarked[ev.ID]; ok {
			continue
		}
		fresh = append(fresh, ev)
	}
	n.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	// The oldest first: they have waited longest.
	sort.SliceStable(fresh, func(i, j int) bool { return fresh[i].At.Before(fresh[j].At) })
	ids := make([]string, len(fresh))
	for i, ev := range fresh {
		ids[i] = ev.ID
	}
	marked, err := n.cfg.Notices.NoticesMarked(ctx, ids)
	if err != nil {
		n.log.Warn("notify marks", "notify: reading the marks of notified events failed", "error", err)
		return
	}
	for _, ev := range fresh {
		if _, ok := marked[ev.ID]; ok {
			n.mu.Lock()
			n.done[ev.ID] = ev.At
			n.mu.Unlock()
			continue
		}
		n.start(o, ev)
	}
}

// delivery is one event waiting for its turn.
type delivery struct {
	o  Object
	ev Event
}

// start queues ev for delivery: up to Parallel deliveries run at once,
// taking the queue in order, so that every event found gets its turn,
// the older first when the caller starts them in that order, however many
// newer ones follow.
func (n *Notifier) start(o Object, ev Event) {
	ev.Notifier = n.cfg.Host
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inFlight[ev.ID] = true
	n.pending = append(n.pending, delivery{o, ev})
	if n.workers < n.cfg.Parallel {
		n.workers++
		n.wg.Add(1)
		go n.deliverAll()
	}
}

// deliverAll delivers queued events until none is left.
func (n *Notifier) deliverAll() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.workers--
			n.mu.Unlock()
			return
		}
		d := n.pending[0]
		n.pending = n.pending[1:]
		n.mu.Unlock()
		n.deliver(d.o, d.ev)
	}
}

// deliver runs o's hook for ev, then marks ev.
func (n *Notifier) deliver(o Object, ev Event) {
	ctx := n.dctx
	if ctx.Err() != nil {
		n.mu.Lock()
		delete(n.inFlight, ev.ID)
		n.mu.Unlock()
		return
	}
	err := n.cfg.Deliver(ctx, o.hook(), ev)
	if ctx.Err() != nil {
		// Stopped mid-delivery: unmarked, the next leader delivers it.
		n.mu.Lock()
		delete(n.inFlight, ev.ID)
		n.mu.Unlock()
		return
	}
	if err != nil {
		n.cfg.Log.Warn("on_failure hook failed", "object", o.Address(), "event", ev.Kind, "event_id", ev.ID, "error", err)
	} else {
		n.cfg.Log.Info("on_failure hook delivered", "object", o.Address(), "event", ev.Kind, "event_id", ev.ID)
	}
	if n.cfg.Observer != nil {
		n.cfg.Observer.HookDelivered(o.Address(), ev.Kind, err == nil)
	}
	n.mu.Lock()
	delete(n.inFlight, ev.ID)
	n.unmarked[ev.ID] = ev.At
	n.mu.Unlock()
	n.markDelivered(ctx)
}

// markDelivered writes the marks of delivered events; one that fails
// stays to be written at the next look (and is not delivered again by
// this host meanwhile).
func (n *Notifier) markDelivered(ctx context.Context) {
	n.mu.Lock()
	pending := make(map[string]time.Time, len(n.unmarked))
	for id, at := range n.unmarked {
		pending[id] = at
	}
	n.mu.Unlock()
	for id, at := range pending {
		if _, err := n.cfg.Notices.MarkNotice(ctx, id); err != nil {
			n.log.Warn("notify marks", "notify: marking a notified event failed; a new leader may deliver it again", "event_id", id, "error", err)
			return
		}
		n.mu.Lock()
		delete(n.unmarked, id)
		n.done[id] = at
		n.mu.Unlock()
	}
}

// declaredSince is when o's hook, as declared now, was first applied
// (backends.HookDeclared); a hook never applied (a stale checkout's) is
// declared by this look.
func (n *Notifier) declaredSince(ctx context.Context, o Object) (time.Time, error) {
	id := backends.HookDeclared(o.Address(), o.hook())
	n.mu.Lock()
	at, ok := n.since[id]
	n.mu.Unlock()
	if ok {
		return at, nil
	}
	at, err := n.cfg.Notices.MarkNotice(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	n.mu.Lock()
	n.since[id] = at
	n.mu.Unlock()
	return at, nil
}

// forgetAfter bounds the memory of marked events: one older than this is
// forgotten, and if a look finds it again (it is still among its object's
// newest), its mark is read again from the store. A task failing every
// second keeps 3,600 ids in memory, not a week's.
const forgetAfter = time.Hour

// forget drops the memory of events older than horizon (host time
// against the events' backend times: a bound on memory, not a rule).
func (n *Notifier) forget(horizon time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, at := range n.done {
		if at.Before(horizon) {
			delete(n.done, id)
		}
	}
}
