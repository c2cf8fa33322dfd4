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
	rate  *spec.RateLimit
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
	case o.rate != nil:
		return o.rate.PreventDestroy
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
		case spec.KindRateLimit:
			o.rate = s.RateLimits[a.Name]
			v = o.rate
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
			o.cron.Sched, err = spec.TaskSchedule(o.cron)
		}
	case spec.KindQueue:
		o.queue = &spec.Queue{Name: a.Name}
		err = json.Unmarshal(p.Spec, o.queue)
	case spec.KindRateLimit:
		o.rate = &spec.RateLimit{Name: a.Name}
		err = json.Unmarshal(p.Spec, o.rate)
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
		Unique: q.Unique, MaxPayload: q.MaxPayload, Claim: q.Claim, RateLimit: q.RateLimit,
	}
}

func rateConfig(r *spec.RateLimit) backends.RateLimitConfig {
	return backends.RateLimitConfig{Name: r.Name, Count: r.Count, Per: r.Per, Burst: r.Burst, Keyed: r.Keyed}
}

// attr is one attribute: value as a plan prints it, raw as plan --json
// gives it (a string, number, boolean, list or mapping; nil for none).
type attr struct {
	name, value string
	raw         any
}

// dur prints a duration; 0 is "0s".
func dur(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.String()
}

// durAttr is a duration attribute; raw is its Go form ("1m30s").
func durAttr(name string, d time.Duration) attr { return attr{name, dur(d), dur(d)} }

// limitAttr is a duration attribute where 0 means no limit: printed
// "none", and null in JSON.
func limitAttr(name string, d time.Duration) attr {
	if d == 0 {
		return attr{name, "none", nil}
	}
	return durAttr(name, d)
}

func strAttr(name, v string) attr { return attr{name, v, v} }

// optStrAttr is a string that is usually unset: left out of the plan when
// empty.
func optStrAttr(name, v string) attr {
	if v == "" {
		return attr{name, "", nil}
	}
	return strAttr(name, v)
}

// scheduleAttr is a task's schedule, left out for a task that runs after
// others.
func scheduleAttr(c *spec.CronTask) attr {
	if c.Schedule == "" {
		return attr{"schedule", "", nil}
	}
	return attr{"schedule", strconv.Quote(c.Schedule), c.Schedule}
}

// afterAttr is the tasks a task runs after, left out when none.
func afterAttr(c *spec.CronTask) attr {
	if len(c.After) == 0 {
		return attr{"after", "", nil}
	}
	return attr{"after", "[" + strings.Join(c.After, ", ") + "]", c.After}
}

// optDurAttr is a duration that is usually unset: left out of the plan
// when 0.
func optDurAttr(name string, d time.Duration) attr {
	if d == 0 {
		return attr{name, "", nil}
	}
	return durAttr(name, d)
}

func intAttr(name string, n int64) attr { return attr{name, strconv.FormatInt(n, 10), n} }

func boolAttr(name string, v bool) attr { return attr{name, strconv.FormatBool(v), v} }

// attrs lists an object's attributes in the order docs/spec.md gives them.
func (o *object) attrs() []attr {
	switch {
	case o.sem != nil:
		s := o.sem
		mw := attr{"max_waiting", "unbounded", nil}
		if s.MaxWaiting != nil {
			mw = intAttr("max_waiting", int64(*s.MaxWaiting))
		}
		return []attr{
			strAttr("backend", s.Backend), intAttr("limit", int64(s.Limit)), durAttr("lease", s.Lease),
			strAttr("mode", s.Mode), strAttr("wake", s.Wake), mw,
			limitAttr("max_hold", s.MaxHold), boolAttr("keyed", s.Keyed), boolAttr("prevent_destroy", s.PreventDestroy),
		}
	case o.cron != nil:
		c := o.cron
		return []attr{
			strAttr("backend", c.Backend), scheduleAttr(c), afterAttr(c), strAttr("timezone", c.Timezone),
			jitterAttr(c),
			commandOrPushAttr(c), strAttr("workdir", c.Workdir), envAttr(c.Env),
			limitAttr("timeout", c.Timeout), durAttr("kill_grace", c.KillGrace),
			strAttr("catch_up", c.CatchUp), intAttr("catch_up_limit", int64(c.CatchUpLimit)), optDurAttr("starting_deadline", c.StartingDeadline), strAttr("overlap", c.Overlap),
			intAttr("max_attempts", int64(c.MaxAttempts)), durAttr("retry_backoff", c.RetryBackoff),
			strAttr("on_host_loss", c.OnHostLoss), strAttr("semaphore", c.Semaphore), optStrAttr("rate_limit", c.RateLimit),
			boolAttr("run_on_create", c.RunOnCreate), boolAttr("paused", c.Paused), intAttr("history_limit", int64(c.HistoryLimit)),
			durAttr("run_lease", c.RunLease), hookAttr(c.OnFailure),
			boolAttr("prevent_destroy", c.PreventDestroy),
		}
	case o.queue != nil:
		q := o.queue
		return []attr{
			strAttr("backend", q.Backend), intAttr("partitions", int64(q.Partitions)),
			durAttr("visibility_timeout", q.VisibilityTimeout), intAttr("max_attempts", int64(q.MaxAttempts)),
			durAttr("retry_backoff", q.RetryBackoff), limitAttr("timeout", q.Timeout),
			strAttr("unique", q.Unique), intAttr("max_payload", q.MaxPayload),
			strAttr("claim", q.Claim), optStrAttr("rate_limit", q.RateLimit), hookAttr(q.OnFailure), boolAttr("prevent_destroy", q.PreventDestroy),
		}
	case o.rate != nil:
		r := o.rate
		return []attr{
			strAttr("backend", r.Backend), {"rate", r.Rate(), r.Rate()}, intAttr("burst", int64(r.Burst)),
			boolAttr("keyed", r.Keyed), boolAttr("prevent_destroy", r.PreventDestroy),
		}
	}
	return nil
}

// hookAttr prints an on_failure hook in one line (its webhook redacted to
// scheme, host and a fingerprint); none is left out of the plan.
func hookAttr(h *spec.Hook) attr {
	if h == nil {
		return attr{"on_failure", "", nil}
	}
	return attr{"on_failure", h.Summary(), h}
}

// jitterAttr prints a task's jitter with the offset its name gives it;
// none is left out of the plan.
func jitterAttr(c *spec.CronTask) attr {
	if c.Jitter == 0 {
		return attr{"jitter", "", nil}
	}
	return attr{"jitter", fmt.Sprintf("%s (this task runs %s after each time)", dur(c.Jitter), dur(spec.JitterOffset(c.Name, c.Jitter))), dur(c.Jitter)}
}

// commandOrPushAttr is a task's command, or its push for a task that
// pushes a job.
func commandOrPushAttr(c *spec.CronTask) attr {
	if p := c.Push; p != nil {
		v := "queue " + p.Queue
		if p.Payload != "" {
			v += ", payload " + strconv.Quote(p.Payload)
		}
		if p.Key != "" {
			v += ", key " + strconv.Quote(p.Key)
		}
		return attr{"push", v, p}
	}
	return commandAttr(c.Command)
}

// commandAttr prints a command as the spec writes it: a list of quoted
// arguments, or one quoted shell string.
func commandAttr(c spec.Command) attr {
	if c.Argv == nil {
		return attr{"command", strconv.Quote(c.Shell), c.Shell}
	}
	q := make([]string, len(c.Argv))
	for k, a := range c.Argv {
		q[k] = strconv.Quote(a)
	}
	return attr{"command", "[" + strings.Join(q, ", ") + "]", append([]string{}, c.Argv...)}
}

// envAttr prints the environment sorted by name, NAME="value" each.
func envAttr(env map[string]string) attr {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for k, key := range keys {
		out[k] = key + "=" + strconv.Quote(env[key])
	}
	var raw any
	if len(env) > 0 {
		raw = env
	}
	return attr{"env", strings.Join(out, " "), raw}
}

// diffAttrs returns the attributes that differ between the applied and the
// desired object, in attribute order.
func diffAttrs(old, new *object) []AttrChange {
	oa, na := old.attrs(), new.attrs()
	ov := make(map[string]attr, len(oa))
	for _, a := range oa {
		ov[a.name] = a
	}
	var out []AttrChange
	for _, a := range na {
		if prev, ok := ov[a.name]; !ok || prev.value != a.value {
			out = append(out, AttrChange{Name: a.name, Old: prev.value, New: a.value, OldValue: prev.raw, NewValue: a.raw})
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
