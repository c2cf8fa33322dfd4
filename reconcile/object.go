package reconcile

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// object is one desired or applied object in the form reconcile compares.
type object struct {
	addr        spec.Address
	backend     string
	backendType string
	raw         json.RawMessage // canonical JSON, as stored in the inventory

	sem   *spec.Semaphore
	cron  *spec.CronTask
	queue *spec.Queue
}

// placement is what forces a replacement when it changes: the backend, and
// for a semaphore also its mode (a session lock and a lease row cannot share
// holders) and whether it is keyed (the semaphore's own slots and its
// instances' cannot share holders either: the new kind admits nobody until
// holders of the old one release).
func (o *object) placement() string {
	if o.sem != nil {
		if o.sem.Keyed {
			return o.backend + "/" + o.sem.Mode + "/keyed"
		}
		return o.backend + "/" + o.sem.Mode
	}
	return o.backend
}

func (o *object) preventDestroy() bool {
	switch {
	case o.sem != nil:
		return o.sem.PreventDestroy
	case o.cron != nil:
		return o.cron.PreventDestroy
	case o.queue != nil:
		return o.queue.PreventDestroy
	}
	return false
}

func (o *object) toPlacement() backends.Placement {
	return backends.Placement{Backend: o.backend, BackendType: o.backendType, Spec: o.raw}
}

// desiredObjects lists the spec's objects in plan order.
func desiredObjects(s *spec.Spec) ([]*object, error) {
	var out []*object
	for _, a := range s.Addresses() {
		b := s.BackendOf(a)
		if b == nil {
			return nil, fmt.Errorf("%s: no backend resolved", a)
		}
		o := &object{addr: a, backend: b.Name, backendType: b.Type}
		var v any
		switch a.Kind {
		case spec.KindSemaphore:
			o.sem = s.Semaphores[a.Name]
			v = o.sem
		case spec.KindCron:
			o.cron = s.Cron[a.Name]
			v = o.cron
		case spec.KindQueue:
			o.queue = s.Queues[a.Name]
			v = o.queue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: encode: %w", a, err)
		}
		o.raw = raw
		out = append(out, o)
	}
	return out, nil
}

// appliedObject decodes an inventory placement back into an object.
func appliedObject(a spec.Address, p backends.Placement) (*object, error) {
	o := &object{addr: a, backend: p.Backend, backendType: p.BackendType, raw: p.Spec}
	var err error
	switch a.Kind {
	case spec.KindSemaphore:
		o.sem = &spec.Semaphore{Name: a.Name}
		err = json.Unmarshal(p.Spec, o.sem)
	case spec.KindCron:
		o.cron = &spec.CronTask{Name: a.Name}
		err = json.Unmarshal(p.Spec, o.cron)
		if err == nil {
			o.cron.Sched, err = spec.ParseSchedule(o.cron.Schedule, o.cron.Timezone)
		}
	case spec.KindQueue:
		o.queue = &spec.Queue{Name: a.Name}
		err = json.Unmarshal(p.Spec, o.queue)
	default:
		err = fmt.Errorf("unknown kind %q", a.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: decode applied spec: %w", a, err)
	}
	return o, nil
}

// semConfig is the config the runtime enforces for a semaphore admitting up
// to limit holders.
func semConfig(s *spec.Semaphore, limit int) backends.SemaphoreConfig {
	mw := -1
	if s.MaxWaiting != nil {
		mw = *s.MaxWaiting
	}
	return backends.SemaphoreConfig{
		Name: s.Name, Limit: limit, Lease: s.Lease, Mode: s.Mode, Wake: s.Wake,
		MaxWaiting: mw, MaxHold: s.MaxHold, Keyed: s.Keyed,
	}
}

func queueConfig(q *spec.Queue) backends.QueueConfig {
	return backends.QueueConfig{
		Name: q.Name, Partitions: q.Partitions, VisibilityTimeout: q.VisibilityTimeout,
		MaxAttempts: q.MaxAttempts, RetryBackoff: q.RetryBackoff, Timeout: q.Timeout,
		Unique: q.Unique, MaxPayload: q.MaxPayload, Claim: q.Claim,
	}
}

// attr is one attribute as a plan prints it.
type attr struct{ name, value string }

func dur(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.String()
}

// attrs lists an object's attributes in the order docs/spec.md gives them.
func (o *object) attrs() []attr {
	b := func(v bool) string { return strconv.FormatBool(v) }
	i := strconv.Itoa
	switch {
	case o.sem != nil:
		s := o.sem
		mw := "unbounded"
		if s.MaxWaiting != nil {
			mw = i(*s.MaxWaiting)
		}
		return []attr{
			{"backend", s.Backend}, {"limit", i(s.Limit)}, {"lease", dur(s.Lease)},
			{"mode", s.Mode}, {"wake", s.Wake}, {"max_waiting", mw},
			{"max_hold", dur(s.MaxHold)}, {"keyed", b(s.Keyed)}, {"prevent_destroy", b(s.PreventDestroy)},
		}
	case o.cron != nil:
		c := o.cron
		cmd := c.Command.Shell
		if c.Command.Argv != nil {
			q := make([]string, len(c.Command.Argv))
			for k, a := range c.Command.Argv {
				q[k] = strconv.Quote(a)
			}
			cmd = "[" + strings.Join(q, ", ") + "]"
		} else {
			cmd = strconv.Quote(cmd)
		}
		keys := make([]string, 0, len(c.Env))
		for k := range c.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		env := make([]string, len(keys))
		for k, key := range keys {
			env[k] = key + "=" + strconv.Quote(c.Env[key])
		}
		return []attr{
			{"backend", c.Backend}, {"schedule", strconv.Quote(c.Schedule)}, {"timezone", c.Timezone},
			{"command", cmd}, {"workdir", c.Workdir}, {"env", strings.Join(env, " ")},
			{"timeout", dur(c.Timeout)}, {"kill_grace", dur(c.KillGrace)},
			{"catch_up", c.CatchUp}, {"catch_up_limit", i(c.CatchUpLimit)}, {"overlap", c.Overlap},
			{"max_attempts", i(c.MaxAttempts)}, {"retry_backoff", dur(c.RetryBackoff)},
			{"on_host_loss", c.OnHostLoss}, {"semaphore", c.Semaphore},
			{"run_on_create", b(c.RunOnCreate)}, {"paused", b(c.Paused)}, {"history_limit", i(c.HistoryLimit)},
			{"run_lease", dur(c.RunLease)},
			{"prevent_destroy", b(c.PreventDestroy)},
		}
	case o.queue != nil:
		q := o.queue
		return []attr{
			{"backend", q.Backend}, {"partitions", i(q.Partitions)},
			{"visibility_timeout", dur(q.VisibilityTimeout)}, {"max_attempts", i(q.MaxAttempts)},
			{"retry_backoff", dur(q.RetryBackoff)}, {"timeout", dur(q.Timeout)},
			{"unique", q.Unique}, {"max_payload", strconv.FormatInt(q.MaxPayload, 10)},
			{"claim", q.Claim}, {"prevent_destroy", b(q.PreventDestroy)},
		}
	}
	return nil
}

// diffAttrs returns the attributes that differ between the applied and the
// desired object, in attribute order.
func diffAttrs(old, new *object) []AttrChange {
	oa, na := old.attrs(), new.attrs()
	ov := make(map[string]string, len(oa))
	for _, a := range oa {
		ov[a.name] = a.value
	}
	var out []AttrChange
	for _, a := range na {
		if prev, ok := ov[a.name]; !ok || prev != a.value {
			out = append(out, AttrChange{Name: a.name, Old: prev, New: a.value})
		}
	}
	return out
}

// jsonEqual compares two JSON documents by value, so that a backend that
// reformats stored JSON does not show up as drift.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
