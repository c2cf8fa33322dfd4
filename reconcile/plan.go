package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Action is what a change does to one object.
type Action string

const (
	Create  Action = "create"
	Update  Action = "update"
	Replace Action = "replace"
	Delete  Action = "delete"
	// Repair puts back state that changed outside coordd (drift).
	Repair Action = "repair"
	// Finish completes a delete or replace that was waiting for holders.
	Finish Action = "finish"
	// Wait reports a delete or replace still waiting for holders; it
	// changes nothing.
	Wait Action = "wait"
)

// Symbol is the Terraform-like marker printed before a change.
func (a Action) Symbol() string {
	switch a {
	case Create:
		return "+"
	case Update, Repair:
		return "~"
	case Replace:
		return "-/+"
	case Delete:
		return "-"
	case Finish:
		return ">"
	}
	return " "
}

// AttrChange is one attribute line, e.g. "limit: 3 -> 5". Old and New are
// as the plan prints them; OldValue and NewValue are the values themselves
// (a string, number, boolean, list or mapping; nil for none), which plan
// --json gives as "old" and "new".
type AttrChange struct {
	Name               string
	Old, New           string
	OldValue, NewValue any
}

// attrChangeJSON is an AttrChange in plan --json; a side absent (a
// create's old, a delete's new) or none is left out.
type attrChangeJSON struct {
	Name string `json:"name"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}

// MarshalJSON gives the values, not their printed form.
func (a AttrChange) MarshalJSON() ([]byte, error) {
	return json.Marshal(attrChangeJSON{Name: a.Name, Old: a.OldValue, New: a.NewValue})
}

// Change is one planned change to one object.
type Change struct {
	Address spec.Address `json:"address"`
	Action  Action       `json:"action"`
	Backend string       `json:"backend"`
	// PrevBackend is where the object lived before a replace.
	PrevBackend string       `json:"prev_backend,omitempty"`
	Attrs       []AttrChange `json:"attrs,omitempty"`
	// Notes explain the consequences: who waits, what moves, what stays.
	Notes []string `json:"notes,omitempty"`
	// Blocked, when set, is why apply refuses this plan.
	Blocked string `json:"blocked,omitempty"`

	desired  *object
	entry    *backends.InventoryEntry
	applied  *object // decoded entry.Placement
	previous *object // decoded entry.Previous
	// schedChanged: the cron schedule or timezone changed, so next_exec is
	// recomputed.
	schedChanged bool
	// oldHeld: the object being replaced or deleted still has holders.
	oldHeld bool
}

// Summary counts changes the way Terraform does: a replace is one add and
// one destroy; repairs and finished drains count as changes.
type Summary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// Plan is the ordered list of changes that makes the backends match the spec.
type Plan struct {
	// Changes are spec changes, in apply order.
	Changes []*Change `json:"changes"`
	// Drift lists state changed outside coordd, repaired by apply.
	Drift []*Change `json:"drift"`
	// Waiting lists deletes and replaces still waiting for holders.
	Waiting []*Change `json:"waiting"`
	// Blocked lists why apply would refuse; the plan is still shown.
	Blocked []string `json:"blocked,omitempty"`
	// Lost lists the backends that lost their data and hold objects that
	// existed there (see loss.go).
	Lost []LostBackend `json:"lost,omitempty"`
	// Warnings are the spec's (spec.Spec.Warnings): advice that does not
	// block the apply.
	Warnings []spec.Warning `json:"warnings"`
	// Overrides lists what operators changed at run time on purpose, which
	// is neither a change nor drift: apply keeps it (a cron task paused
	// with coordd cron pause).
	Overrides []Override `json:"overrides"`

	SpecHash          string  `json:"spec_hash"`
	AppliedGeneration int64   `json:"applied_generation"`
	Summary           Summary `json:"summary"`

	// held counts the changes moved to Waiting by a data-loss hold.
	held int
}

// Override is one operator's override of an applied object.
type Override struct {
	Address spec.Address `json:"address"`
	Backend string       `json:"backend"`
	// Paused is the operator's pause of a cron task.
	Paused *backends.CronPause `json:"paused,omitempty"`
	// Moves: the object moves to another backend; apply carries the
	// override over.
	Moves bool `json:"moves,omitempty"`
}

// HasChanges reports whether apply would change anything.
func (p *Plan) HasChanges() bool { return len(p.Changes)+len(p.Drift) > 0 }

// NeedsApply reports whether apply has work: changes, changes held by a
// data-loss hold, or a data loss to record (which starts its hold).
func (p *Plan) NeedsApply() bool {
	if p.HasChanges() || p.held > 0 {
		return true
	}
	for _, l := range p.Lost {
		if !l.Recorded {
			return true
		}
	}
	return false
}

// Fingerprint identifies the plan's effect, so that apply can check that the
// plan it re-computes under the lock is the one the operator approved.
// Waiting entries are left out: holder counts move on their own.
func (p *Plan) Fingerprint() string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode(p.Changes)
	_ = enc.Encode(p.Drift)
	_ = enc.Encode(p.Blocked)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Options change what apply is allowed to do.
type Options struct {
	// AllowEmpty lets a spec with no objects delete everything applied.
	AllowEmpty bool
	// AllowDestroyJobs lets a delete or replace drop a queue's jobs.
	AllowDestroyJobs bool
	// Resync plans toward the applied record instead of the local spec:
	// it repairs drift and finishes pending drains, and never creates,
	// updates or deletes anything the last apply did not decide. The
	// daemon's periodic resync uses it, so a host with a stale checkout
	// repairs toward what was applied, not toward its own files.
	Resync bool
}

// ErrBlocked is returned by Apply when the plan has blocked changes.
var ErrBlocked = errors.New("plan is blocked")

// obsKey identifies one object on one backend.
type obsKey struct {
	backend string
	addr    spec.Address
}

// observations holds what the backends reported.
type observations struct {
	sem   map[obsKey]*backends.SemaphoreState
	cron  map[obsKey]*backends.CronState
	queue map[obsKey]*backends.QueueState
	rate  map[obsKey]*backends.RateLimitState
}

func (o *observations) semHolders(backend string, a spec.Address) int {
	if st := o.sem[obsKey{backend, a}]; st != nil {
		return len(st.Holders)
	}
	return 0
}

// observe asks each backend about the objects it should hold, one batch per
// backend and kind.
func (e *Engine) observe(ctx context.Context, keys []obsKey) (*observations, error) {
	type group struct {
		backend string
		kind    spec.Kind
	}
	names := map[group][]string{}
	for _, k := range keys {
		g := group{k.backend, k.addr.Kind}
		names[g] = append(names[g], k.addr.Name)
	}
	groups := make([]group, 0, len(names))
	for g := range names {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].backend != groups[j].backend {
			return groups[i].backend < groups[j].backend
		}
		return groups[i].kind < groups[j].kind
	})
	obs := &observations{
		sem:   map[obsKey]*backends.SemaphoreState{},
		cron:  map[obsKey]*backends.CronState{},
		queue: map[obsKey]*backends.QueueState{},
		rate:  map[obsKey]*backends.RateLimitState{},
	}
	for _, g := range groups {
		b, err := e.backend(g.backend)
		if err != nil {
			return nil, err
		}
		ns := names[g]
		switch g.kind {
		case spec.KindSemaphore:
			adm := b.Semaphores()
			if adm == nil {
				return nil, fmt.Errorf("backend %q (%s): semaphores: %w", g.backend, b.Type(), backends.ErrUnsupported)
			}
			m, err := adm.ObserveSemaphores(ctx, ns)
			if err != nil {
				return nil, fmt.Errorf("observe semaphores on %q: %w", g.backend, err)
			}
			for n, st := range m {
				obs.sem[obsKey{g.backend, spec.Address{Kind: g.kind, Name: n}}] = st
			}
		case spec.KindCron:
			adm := b.Crons()
			if adm == nil {
				return nil, fmt.Errorf("backend %q (%s): cron: %w", g.backend, b.Type(), backends.ErrUnsupported)
			}
			m, err := adm.ObserveCrons(ctx, ns)
			if err != nil {
				return nil, fmt.Errorf("observe cron tasks on %q: %w", g.backend, err)
			}
			for n, st := range m {
				obs.cron[obsKey{g.backend, spec.Address{Kind: g.kind, Name: n}}] = st
			}
		case spec.KindQueue:
			adm := b.Queues()
			if adm == nil {
				return nil, fmt.Errorf("backend %q (%s): queues: %w", g.backend, b.Type(), backends.ErrUnsupported)
			}
			m, err := adm.ObserveQueues(ctx, ns)
			if err != nil {
				return nil, fmt.Errorf("observe queues on %q: %w", g.backend, err)
			}
			for n, st := range m {
				obs.queue[obsKey{g.backend, spec.Address{Kind: g.kind, Name: n}}] = st
			}
		case spec.KindRateLimit:
			adm := backends.RateLimitsOf(b)
			if adm == nil {
				return nil, fmt.Errorf("backend %q (%s): rate limits: %w", g.backend, b.Type(), backends.ErrUnsupported)
			}
			m, err := adm.ObserveRateLimits(ctx, ns)
			if err != nil {
				return nil, fmt.Errorf("observe rate limits on %q: %w", g.backend, err)
			}
			for n, st := range m {
				obs.rate[obsKey{g.backend, spec.Address{Kind: g.kind, Name: n}}] = st
			}
		}
	}
	return obs, nil
}

// plan computes the plan from the spec, the inventory and the backends.
func (e *Engine) plan(ctx context.Context, opts Options) (*Plan, error) {
	st, err := e.State.LoadState(ctx)
	if err != nil {
		return nil, fmt.Errorf("load applied state: %w", err)
	}
	desired, err := e.desired(st, opts)
	if err != nil {
		return nil, err
	}
	loss, err := e.lossInfos(ctx, st, desired, true)
	if err != nil {
		return nil, err
	}
	inv := make(map[spec.Address]*backends.InventoryEntry, len(st.Entries))
	var keys []obsKey
	for i := range st.Entries {
		en := &st.Entries[i]
		inv[en.Address] = en
		keys = append(keys, obsKey{en.Backend, en.Address})
		if en.Previous != nil {
			keys = append(keys, obsKey{en.Previous.Backend, en.Address})
		}
	}
	for _, d := range desired {
		if en := inv[d.addr]; en == nil || en.Backend != d.backend {
			keys = append(keys, obsKey{d.backend, d.addr})
		}
	}
	obs, err := e.observe(ctx, keys)
	if err != nil {
		return nil, err
	}

	p := &Plan{SpecHash: e.Spec.Hash(), Changes: []*Change{}, Drift: []*Change{}, Waiting: []*Change{}, Overrides: []Override{},
		Warnings: append([]spec.Warning{}, e.Spec.Warnings()...)}
	if opts.Resync {
		p.SpecHash = ""
		if st.Last != nil {
			p.SpecHash = st.Last.SpecHash
		}
	}
	if st.Last != nil {
		p.AppliedGeneration = st.Last.Generation
	}
	seen := make(map[spec.Address]bool, len(desired))
	var deletes []*Change
	for _, d := range desired {
		seen[d.addr] = true
		if err := e.planDesired(p, d, inv[d.addr], obs, opts); err != nil {
			return nil, err
		}
	}
	for i := range st.Entries {
		en := &st.Entries[i]
		if seen[en.Address] {
			continue
		}
		c, err := planRemoved(en, obs, opts)
		if err != nil {
			return nil, err
		}
		switch c.Action {
		case Wait:
			p.Waiting = append(p.Waiting, c)
		default:
			deletes = append(deletes, c)
		}
	}
	// Deletes go last and in reverse kind order, so a cron task that names a
	// semaphore is removed before the semaphore.
	sort.SliceStable(deletes, func(i, j int) bool {
		return kindOrder(deletes[i].Address.Kind) > kindOrder(deletes[j].Address.Kind)
	})
	p.Changes = append(p.Changes, deletes...)
	holdLost(p, loss)
	p.Lost = lostBackends(loss)

	if len(desired) == 0 && len(st.Entries) > 0 && !opts.AllowEmpty && !opts.Resync {
		p.Blocked = append(p.Blocked, fmt.Sprintf(
			"the spec declares no objects but %d are applied; an empty or broken spec never deletes what is running (use --allow-empty to delete them all)",
			len(st.Entries)))
	}
	if !opts.Resync {
		blocked, err := e.checkPayloads(ctx, desired)
		if err != nil {
			return nil, err
		}
		p.Blocked = append(p.Blocked, blocked...)
	}
	for _, c := range append(append([]*Change{}, p.Changes...), p.Drift...) {
		if c.Blocked != "" {
			p.Blocked = append(p.Blocked, c.Address.String()+": "+c.Blocked)
		}
		switch c.Action {
		case Create:
			p.Summary.Add++
		case Update, Repair:
			p.Summary.Change++
		case Replace:
			p.Summary.Add++
			p.Summary.Destroy++
		case Delete:
			p.Summary.Destroy++
		case Finish:
			if c.entry != nil && c.entry.Status == backends.StatusDraining && c.desired == nil {
				p.Summary.Destroy++
			} else {
				p.Summary.Change++
			}
		}
	}
	return p, nil
}

// checkPayloads lists the queues of the spec whose max_payload exceeds what
// their backend's server can store (backends.PayloadLimiter): every push
// of a payload between the two would fail, so the spec is refused instead.
// Every declared queue counts, changed or not, since the server's limit may
// have been lowered after the queue was applied. A resync (the daemon's)
// does not check: it only repairs what was applied.
func (e *Engine) checkPayloads(ctx context.Context, desired []*object) ([]string, error) {
	limits := map[string]int64{}
	var blocked []string
	for _, d := range desired {
		if d.queue == nil {
			continue
		}
		limit, ok := limits[d.backend]
		if !ok {
			b, err := e.backend(d.backend)
			if err != nil {
				return nil, err
			}
			limit = -1 // no limit but spec.MaxPayloadCap
			if pl, isLimiter := b.(backends.PayloadLimiter); isLimiter {
				if limit, err = pl.MaxPayload(ctx); err != nil {
					return nil, fmt.Errorf("backend %q: payload limit: %w", d.backend, err)
				}
			}
			limits[d.backend] = limit
		}
		if limit >= 0 && d.queue.MaxPayload > limit {
			blocked = append(blocked, fmt.Sprintf(
				"%s: max_payload %d exceeds the %d bytes that backend %q (%s) can store; lower max_payload or raise the server's limit%s",
				d.addr, d.queue.MaxPayload, limit, d.backend, d.backendType, serverLimitHint(d.backendType)))
		}
	}
	return blocked, nil
}

// serverLimitHint names the server setting behind a backend's payload
// limit.
func serverLimitHint(typ string) string {
	switch typ {
	case spec.TypeMySQL:
		return " (max_allowed_packet, which must hold the payload twice over)"
	case spec.TypeRedis:
		return " (proto-max-bulk-len)"
	}
	return ""
}

// desired lists the objects the plan aims at: the spec's, or with Resync
// the applied ones.
func (e *Engine) desired(st backends.State, opts Options) ([]*object, error) {
	if opts.Resync {
		return inventoryObjects(st)
	}
	return desiredObjects(e.Spec)
}

func kindOrder(k spec.Kind) int {
	for i, x := range spec.Kinds {
		if x == k {
			return i
		}
	}
	return len(spec.Kinds)
}

// planDesired plans one object that the spec declares.
func (e *Engine) planDesired(p *Plan, d *object, en *backends.InventoryEntry, obs *observations, opts Options) error {
	c := &Change{Address: d.addr, Backend: d.backend, desired: d, entry: en}
	if en == nil {
		c.Action = Create
		for _, a := range d.attrs() {
			if a.value != "" {
				c.Attrs = append(c.Attrs, AttrChange{Name: a.name, New: a.value, NewValue: a.raw})
			}
		}
		if d.cron != nil {
			if d.cron.RunOnCreate {
				c.Notes = append(c.Notes, "run_on_create: the first run is due at once")
			} else {
				c.Notes = append(c.Notes, "next_exec is the first scheduled time after apply (backend time)")
			}
		}
		p.Changes = append(p.Changes, c)
		return nil
	}
	applied, err := appliedObject(en.Address, en.Placement)
	if err != nil {
		return err
	}
	c.applied = applied
	if en.Previous != nil {
		if c.previous, err = appliedObject(en.Address, *en.Previous); err != nil {
			return err
		}
	}
	if st := obs.cron[obsKey{applied.backend, d.addr}]; applied.cron != nil && st != nil && st.Paused != nil {
		// Not a note of c: the fingerprint apply checks must not change
		// when an operator pauses or resumes between plan and apply.
		p.Overrides = append(p.Overrides, Override{Address: d.addr, Backend: applied.backend, Paused: st.Paused,
			Moves: applied.backend != d.backend})
	}
	c.Attrs = diffAttrs(applied, d)
	if d.cron != nil && applied.cron != nil {
		c.schedChanged = scheduleChanged(applied.cron, d.cron)
	}

	if applied.placement() != d.placement() {
		c.Action = Replace
		c.PrevBackend = applied.backend
		planReplace(c, applied, d, obs, opts)
		p.Changes = append(p.Changes, c)
		return nil
	}

	// Same placement. A replacement in progress finishes once the previous
	// placement has drained.
	if en.Status == backends.StatusReplacing && c.previous != nil {
		held := obs.semHolders(c.previous.backend, d.addr)
		if held > 0 {
			p.Waiting = append(p.Waiting, &Change{
				Address: d.addr, Action: Wait, Backend: d.backend, PrevBackend: c.previous.backend,
				Notes: []string{fmt.Sprintf("replacing: admits nobody until %d holder(s) on %s release", held, c.previous.backend)},
			})
		} else {
			c.Action = Finish
			c.PrevBackend = c.previous.backend
			c.Notes = append(c.Notes, fmt.Sprintf("holders on %s have drained; the replacement now admits up to %d", c.previous.backend, d.sem.Limit))
			p.Changes = append(p.Changes, c)
			return nil
		}
	}
	if en.Status == backends.StatusDraining {
		c.Action = Update
		c.Notes = append(c.Notes, "declared again: cancels the pending delete")
		p.Changes = append(p.Changes, c)
		return nil
	}
	if len(c.Attrs) > 0 {
		c.Action = Update
		c.Notes = append(c.Notes, updateNotes(applied, d, obs)...)
		p.Changes = append(p.Changes, c)
		return nil
	}
	if notes := driftNotes(d, effectiveLimit(en, d, obs), obs); len(notes) > 0 {
		c.Action = Repair
		c.Attrs = nil
		c.Notes = notes
		p.Drift = append(p.Drift, c)
	}
	return nil
}

// effectiveLimit is the limit the backend should enforce now: 0 while a
// replacement waits for the previous placement to drain.
func effectiveLimit(en *backends.InventoryEntry, d *object, obs *observations) int {
	if d.sem == nil {
		return 0
	}
	if en != nil && en.Status == backends.StatusReplacing && en.Previous != nil &&
		obs.semHolders(en.Previous.Backend, d.addr) > 0 {
		return 0
	}
	return d.sem.Limit
}

func planReplace(c *Change, old, d *object, obs *observations, opts Options) {
	if c.previous != nil && c.previous.placement() != d.placement() &&
		obs.semHolders(c.previous.backend, d.addr) > 0 {
		c.Blocked = fmt.Sprintf("an earlier replacement is still draining on %s; wait for its holders before changing backend or mode again", c.previous.backend)
		return
	}
	if old.preventDestroy() {
		c.Blocked = "prevent_destroy is set on the applied object; apply with prevent_destroy: false first"
		return
	}
	switch {
	case d.sem != nil:
		if held := obs.semHolders(old.backend, d.addr); held > 0 {
			c.oldHeld = true
			c.Notes = append(c.Notes, fmt.Sprintf("the new semaphore admits nobody until %d holder(s) on %s (mode %s) release", held, old.backend, old.sem.Mode))
		}
	case d.cron != nil:
		c.Notes = append(c.Notes, "a run in progress on the old backend finishes; next_exec is recomputed on the new one")
	case d.rate != nil:
		c.Notes = append(c.Notes, "the limit starts idle on the new backend: permits granted on the old one no longer count")
	case d.queue != nil:
		if q := obs.queue[obsKey{old.backend, d.addr}]; q != nil && q.Jobs() > 0 {
			if !opts.AllowDestroyJobs {
				c.Blocked = fmt.Sprintf("%d job(s) on %s would be dropped; drain the queue or use --allow-destroy-jobs", q.Jobs(), old.backend)
			} else {
				c.Notes = append(c.Notes, fmt.Sprintf("drops %d job(s) on %s (--allow-destroy-jobs)", q.Jobs(), old.backend))
			}
		}
	}
}

func updateNotes(old, d *object, obs *observations) []string {
	var notes []string
	switch {
	case d.sem != nil && d.sem.Keyed:
		// Each instance has the limit: count the instances above it.
		over, held := 0, 0
		if st := obs.sem[obsKey{d.backend, d.addr}]; st != nil && d.sem.Limit < old.sem.Limit {
			for _, i := range st.Instances {
				if len(i.Holders) > d.sem.Limit {
					over++
					held += len(i.Holders)
				}
			}
		}
		if over > 0 {
			notes = append(notes, fmt.Sprintf("%d holder(s) of %d key(s) above the new limit keep their slots until they release; nobody is admitted above %d per key", held, over, d.sem.Limit))
		}
	case d.sem != nil:
		held := obs.semHolders(d.backend, d.addr)
		if d.sem.Limit < old.sem.Limit && held > d.sem.Limit {
			notes = append(notes, fmt.Sprintf("%d holder(s) keep their slots until they release; nobody is admitted above %d", held, d.sem.Limit))
		}
	case d.cron != nil:
		switch {
		case !scheduleChanged(old.cron, d.cron):
		case len(d.cron.After) > 0:
			notes = append(notes, "next_exec is cleared: the task runs when "+afterWhen(d.cron))
		default:
			notes = append(notes, "next_exec is recomputed from the new schedule")
		}
		if !jsonEqual(mustJSON(old.cron.Command), mustJSON(d.cron.Command)) {
			notes = append(notes, "the new command applies from the next run; a run in progress finishes unchanged")
		}
	case d.queue != nil:
		if d.queue.Partitions < old.queue.Partitions {
			notes = append(notes, fmt.Sprintf("jobs in partitions %d..%d move to the remaining partitions; none is lost", d.queue.Partitions, old.queue.Partitions-1))
		}
	case d.rate != nil:
		if d.rate.Keyed != old.rate.Keyed {
			notes = append(notes, "keyed changes: the permits granted so far are forgotten, and the limit starts idle")
		} else if d.rate.Interval() != old.rate.Interval() || d.rate.Burst != old.rate.Burst {
			notes = append(notes, "the permits granted so far keep counting; the new rate spaces the ones after them")
		}
	}
	return notes
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// scheduleChanged reports whether a task's times change from old to new:
// its schedule, timezone, jitter or the tasks it runs after.
func scheduleChanged(old, new *spec.CronTask) bool {
	return old.Schedule != new.Schedule || old.Timezone != new.Timezone || old.Jitter != new.Jitter ||
		!slices.Equal(old.After, new.After)
}

// afterWhen says when a task with after runs, for plan notes.
func afterWhen(c *spec.CronTask) string {
	if len(c.After) == 1 {
		return "a run of " + c.After[0] + " succeeds"
	}
	return "each of " + strings.Join(c.After, ", ") + " has succeeded since its last run"
}

// driftNotes compares what a backend holds with what was applied.
func driftNotes(d *object, limit int, obs *observations) []string {
	k := obsKey{d.backend, d.addr}
	switch {
	case d.sem != nil:
		st := obs.sem[k]
		if st == nil {
			return []string{"missing in backend " + d.backend + "; apply re-creates it"}
		}
		var notes []string
		if want := semConfig(d.sem, limit); st.Config != want {
			notes = append(notes, "config in backend differs: "+diffStruct(st.Config, want))
		}
		if have, want := st.Slots, max(limit, len(st.Holders)); have < want {
			notes = append(notes, fmt.Sprintf("%d slot(s) missing (have %d, want %d)", want-have, have, want))
		} else if have > want {
			notes = append(notes, fmt.Sprintf("%d extra slot(s) (have %d, want %d)", have-want, have, want))
		}
		return notes
	case d.cron != nil:
		st := obs.cron[k]
		if st == nil {
			return []string{"missing in backend " + d.backend + "; apply re-creates it and recomputes next_exec"}
		}
		var notes []string
		if !jsonEqual(st.Def, d.raw) {
			notes = append(notes, "definition in backend differs from the applied one")
		}
		if st.NextExec.IsZero() && len(d.cron.After) == 0 {
			notes = append(notes, "next_exec is missing; apply recomputes it")
		}
		return notes
	case d.queue != nil:
		st := obs.queue[k]
		if st == nil {
			return []string{"missing in backend " + d.backend + "; apply re-creates it"}
		}
		var notes []string
		if want := queueConfig(d.queue); st.Config != want {
			notes = append(notes, "config in backend differs: "+diffStruct(st.Config, want))
		}
		if st.PartitionsPresent < d.queue.Partitions {
			notes = append(notes, fmt.Sprintf("%d partition(s) missing (have %d, want %d)", d.queue.Partitions-st.PartitionsPresent, st.PartitionsPresent, d.queue.Partitions))
		}
		if st.Stranded > 0 {
			notes = append(notes, fmt.Sprintf("%d job(s) stranded in removed partitions; apply moves them", st.Stranded))
		}
		return notes
	case d.rate != nil:
		st := obs.rate[k]
		if st == nil {
			return []string{"missing in backend " + d.backend + "; apply re-creates it (idle: it grants its burst at once)"}
		}
		if want := rateConfig(d.rate); st.Config != want {
			return []string{"config in backend differs: " + diffStruct(st.Config, want)}
		}
	}
	return nil
}

// planRemoved plans an applied object that the spec no longer declares.
func planRemoved(en *backends.InventoryEntry, obs *observations, opts Options) (*Change, error) {
	applied, err := appliedObject(en.Address, en.Placement)
	if err != nil {
		return nil, err
	}
	c := &Change{Address: en.Address, Action: Delete, Backend: en.Backend, entry: en, applied: applied}
	if en.Previous != nil {
		if c.previous, err = appliedObject(en.Address, *en.Previous); err != nil {
			return nil, err
		}
	}
	k := obsKey{en.Backend, en.Address}
	if en.Status == backends.StatusDraining {
		if held := obs.semHolders(en.Backend, en.Address); held > 0 {
			c.Action = Wait
			c.Notes = []string{fmt.Sprintf("draining: deleted once %d holder(s) release; admits nobody meanwhile", held)}
		} else {
			c.Action = Finish
			c.Notes = []string{"holders have drained; the delete completes"}
		}
		return c, nil
	}
	if applied.preventDestroy() {
		c.Blocked = "prevent_destroy is set on the applied object; apply with prevent_destroy: false first"
	}
	for _, a := range applied.attrs() {
		if a.value != "" {
			c.Attrs = append(c.Attrs, AttrChange{Name: a.name, Old: a.value, OldValue: a.raw})
		}
	}
	switch {
	case applied.sem != nil:
		held := obs.semHolders(en.Backend, en.Address)
		if c.previous != nil {
			held += obs.semHolders(c.previous.backend, en.Address)
		}
		if held > 0 {
			c.oldHeld = true
			c.Notes = append(c.Notes, fmt.Sprintf("waits for %d holder(s) to release; admits nobody meanwhile", held))
		}
	case applied.cron != nil:
		if st := obs.cron[k]; st != nil && st.Running > 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("%d run(s) in progress finish", st.Running))
		}
		if st := obs.cron[k]; st != nil && st.Paused != nil {
			c.Notes = append(c.Notes, "the operator's pause (coordd cron pause) goes with the task")
		}
	case applied.queue != nil:
		if q := obs.queue[k]; q != nil && q.Jobs() > 0 {
			if !opts.AllowDestroyJobs {
				c.Blocked = fmt.Sprintf("the queue still holds %d job(s); drain it or use --allow-destroy-jobs", q.Jobs())
			} else {
				c.Notes = append(c.Notes, fmt.Sprintf("drops %d job(s) (--allow-destroy-jobs)", q.Jobs()))
			}
		}
	}
	return c, nil
}

// inventoryObjects is the applied record as desired objects: every entry
// that is not being deleted, in plan order.
func inventoryObjects(st backends.State) ([]*object, error) {
	var out []*object
	for _, k := range spec.Kinds {
		for i := range st.Entries {
			en := &st.Entries[i]
			if en.Address.Kind != k || en.Status == backends.StatusDraining {
				continue
			}
			o, err := appliedObject(en.Address, en.Placement)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	return out, nil
}
