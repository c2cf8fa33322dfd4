package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/clusterview"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// The pages read the store the way the CLI does: `coordd status` (cluster),
// `sem status`, `cron list` and `cron history`, `queue stats` and `queue
// dead`, through the same backend calls, with the daemon's open backends.
// A read that fails is shown on the page in place of its section.

// offered lists the actions a page may show for objects of kind: those
// on one dead job (Action.Job) or those on the object.
func (d *Dashboard) offered(p *page, kind spec.Kind, job bool) []Action {
	if !p.Actions || p.Session == nil {
		return nil
	}
	var out []Action
	for _, a := range d.actionsFor(kind) {
		if a.Job == job {
			out = append(out, a)
		}
	}
	p.Forms = p.Forms || len(out) > 0
	return out
}

// ---- cluster ----

type hostRow struct {
	Host, State, Version, SpecHash string
	Leader, RunsApplied            bool
	PID                            int
	StartedAt, LastSeen            time.Time
	Ago                            time.Duration
}

type hashGroup struct {
	SpecHash string
	Applied  bool
	Hosts    []string
}

type backendRow struct {
	Name, Type string
	Now        time.Time
	Skew       time.Duration
	Err        string
	// Hold says that the backend holds its semaphores after a data loss,
	// and until when ("" when it does not).
	Hold string
}

type planView struct {
	At      time.Time
	Err     string
	Changes []changeView
	Drift   []changeView
	Waiting []changeView
	Blocked []string
	Lost    []string
	Summary reconcile.Summary
}

type changeView struct {
	Symbol, Address, Action, Backend, Blocked string
	Attrs                                     []string
	Notes                                     []string
}

type clusterData struct {
	Leader       *backends.Term
	LeaderErr    string
	LocalHash    string
	Applied      *backends.ApplyRecord
	HashWarning  string
	StateErr     string
	Hosts        []hostRow
	HostsErr     string
	HostsNow     time.Time
	Groups       []hashGroup
	Backends     []backendRow
	Plan         *planView
	Semaphores   int
	Cron         int
	Queues       int
	ClusterStore string
}

func (d *Dashboard) clusterPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	c := &clusterData{LocalHash: s.Hash(), Semaphores: len(s.Semaphores), Cron: len(s.Cron), Queues: len(s.Queues), ClusterStore: s.Cluster.Backend}
	cb := e.Backends[s.Cluster.Backend]
	if l, ok := cb.(backends.Leader); ok {
		t, err := l.CurrentLeader(ctx)
		switch {
		case err == nil:
			c.Leader = &t
		case !isNotFound(err):
			c.LeaderErr = err.Error()
		}
	}
	if st, err := e.State.LoadState(ctx); err != nil {
		c.StateErr = err.Error()
	} else {
		c.Applied = st.Last
		c.HashWarning = clusterview.HashWarning(ctx, e.State, st.Last, c.LocalHash)
	}
	if reg, ok := cb.(backends.HostRegistry); ok {
		if hs, err := reg.ListHosts(ctx); err != nil {
			c.HostsErr = err.Error()
		} else {
			c.addHosts(hs)
		}
	}
	names := make([]string, 0, len(e.Backends))
	for n := range e.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := e.Backends[n]
		row := backendRow{Name: n, Type: b.Type()}
		sent := time.Now()
		if now, err := b.Now(ctx); err != nil {
			row.Err = err.Error()
		} else {
			row.Now = now
			row.Skew = now.Sub(sent.Add(time.Since(sent) / 2)).Round(time.Millisecond)
		}
		if lg, ok := b.(backends.LossGuard); ok && row.Err == "" {
			if ls, err := lg.ObserveLoss(ctx); err == nil && ls.Holding() {
				row.Hold = (&backends.LossHoldError{Backend: n, Cause: ls.Cause, Until: ls.HoldUntil, Left: ls.HoldUntil.Sub(ls.Now)}).Error()
			}
		}
		c.Backends = append(c.Backends, row)
	}
	c.Plan = d.plans.get(ctx, s, e)
	return c, http.StatusOK
}

func isNotFound(err error) bool { return errors.Is(err, backends.ErrNotFound) }

// addHosts fills the hosts section as `coordd status` does.
func (c *clusterData) addHosts(hs backends.Hosts) {
	applied := ""
	if c.Applied != nil {
		applied = c.Applied.SpecHash
	}
	c.HostsNow = hs.Now
	for _, h := range hs.Hosts {
		c.Hosts = append(c.Hosts, hostRow{
			Host: h.Host, State: h.State(hs.Now), Version: h.Version, SpecHash: h.SpecHash,
			Leader: clusterview.IsLeader(c.Leader, h, hs.Now), RunsApplied: applied != "" && h.SpecHash == applied,
			PID: h.PID, StartedAt: h.StartedAt, LastSeen: h.LastSeen, Ago: max(hs.Now.Sub(h.LastSeen), 0),
		})
	}
	for hash, hosts := range hs.LiveSpecHashes() {
		c.Groups = append(c.Groups, hashGroup{SpecHash: hash, Applied: applied != "" && hash == applied, Hosts: hosts})
	}
	sort.Slice(c.Groups, func(i, j int) bool {
		a, b := c.Groups[i], c.Groups[j]
		if a.Applied != b.Applied {
			return a.Applied
		}
		return a.SpecHash < b.SpecHash
	})
}

// planEvery is how long a computed plan is shown before it is computed
// again: a plan observes every object, and pages refresh every 10 s.
const planEvery = 30 * time.Second

// planCache keeps the last plan of the spec hash it was computed for.
type planCache struct {
	mu   sync.Mutex
	hash string
	view *planView
}

func (c *planCache) get(ctx context.Context, s *spec.Spec, e *reconcile.Engine) *planView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil && c.hash == s.Hash() && time.Since(c.view.At) < planEvery {
		return c.view
	}
	v := &planView{At: time.Now()}
	p, err := e.Plan(ctx, reconcile.Options{})
	if err != nil {
		v.Err = err.Error()
	} else {
		v.Changes, v.Drift, v.Waiting = changeViews(p.Changes), changeViews(p.Drift), changeViews(p.Waiting)
		v.Blocked, v.Summary = p.Blocked, p.Summary
		for _, l := range p.Lost {
			v.Lost = append(v.Lost, lostText(l))
		}
	}
	c.hash, c.view = s.Hash(), v
	return v
}

// lostText says what a backend's data loss means for its semaphores, as
// plan does.
func lostText(l reconcile.LostBackend) string {
	if !l.Recorded {
		return fmt.Sprintf("backend %s lost its data; the next apply records it and holds its semaphores back for %s", l.Backend, span(l.Left))
	}
	if l.Cause == backends.LossCauseChanged {
		return fmt.Sprintf("backend %s restarted or failed over and may have lost its last writes; its semaphores grant no slot until %s (%s more)", l.Backend, stamp(l.HoldUntil), span(l.Left))
	}
	return fmt.Sprintf("backend %s lost its data; its semaphores are held back until %s (%s more)", l.Backend, stamp(l.HoldUntil), span(l.Left))
}

func changeViews(cs []*reconcile.Change) []changeView {
	out := make([]changeView, 0, len(cs))
	for _, c := range cs {
		v := changeView{Symbol: c.Action.Symbol(), Address: c.Address.String(), Action: string(c.Action), Backend: c.Backend, Notes: c.Notes, Blocked: c.Blocked}
		for _, a := range c.Attrs {
			switch {
			case a.Old == "":
				v.Attrs = append(v.Attrs, a.Name+": "+a.New)
			case a.New == "":
				v.Attrs = append(v.Attrs, a.Name+": "+a.Old+" -> (none)")
			default:
				v.Attrs = append(v.Attrs, a.Name+": "+a.Old+" -> "+a.New)
			}
		}
		out = append(out, v)
	}
	return out
}

// ---- semaphores ----

type holderRow struct {
	Slot      int
	Key       string
	Host      string
	PID       int
	Since     time.Time
	Held      time.Duration
	Expires   time.Time
	ExpiresIn time.Duration
	Session   int64
	Fencing   int64
}

type instanceRow struct {
	Key     string
	Waiters int
	Holders []holderRow
	Line    []waiterRow
}

type semRow struct {
	Name, Backend string
	Applied       bool
	Config        backends.SemaphoreConfig
	Slots         int
	Expired       int
	Waiters       int
	Holders       []holderRow
	Instances     []instanceRow
	Err           string
	Now           time.Time
	// Line lists the waiters in line (waiters.go); NoLine says why the
	// backend lists none, LineErr why the listing failed.
	Line    []waiterRow
	NoLine  string
	LineErr string
}

func holderRows(hs []backends.Holder, now time.Time) []holderRow {
	out := make([]holderRow, 0, len(hs))
	for _, h := range hs {
		r := holderRow{Slot: h.Slot, Key: h.Key, Host: h.Host, PID: h.PID, Since: h.AcquiredAt, Expires: h.ExpiresAt, Session: h.Session, Fencing: h.Fencing}
		if !h.AcquiredAt.IsZero() {
			r.Held = now.Sub(h.AcquiredAt)
		}
		if !h.ExpiresAt.IsZero() {
			r.ExpiresIn = h.ExpiresAt.Sub(now)
		}
		out = append(out, r)
	}
	return out
}

// byBackend groups names by the backend that the spec puts each in.
func byBackend(names []string, backendOf func(string) string) ([]string, map[string][]string) {
	m := map[string][]string{}
	var order []string
	for _, n := range names {
		b := backendOf(n)
		if m[b] == nil {
			order = append(order, b)
		}
		m[b] = append(m[b], n)
	}
	sort.Strings(order)
	return order, m
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (d *Dashboard) semaphoresPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	names := sortedKeys(s.Semaphores)
	rows := map[string]*semRow{}
	for _, n := range names {
		rows[n] = &semRow{Name: n, Backend: s.Semaphores[n].Backend}
	}
	order, groups := byBackend(names, func(n string) string { return s.Semaphores[n].Backend })
	for _, bn := range order {
		ns := groups[bn]
		fail := func(err error) {
			for _, n := range ns {
				rows[n].Err = err.Error()
			}
		}
		b := e.Backends[bn]
		adm, ok := b.(backends.SemaphoreAdmin)
		if !ok {
			fail(fmt.Errorf("backend %q is not open on this host", bn))
			continue
		}
		now, err := b.Now(ctx)
		if err != nil {
			fail(err)
			continue
		}
		m, err := adm.ObserveSemaphores(ctx, ns)
		if err != nil {
			fail(err)
			continue
		}
		for _, n := range ns {
			st := m[n]
			row := rows[n]
			row.Now = now
			if st == nil {
				continue
			}
			row.Applied, row.Config, row.Slots, row.Expired, row.Waiters = true, st.Config, st.Slots, st.Expired, st.Waiters
			row.Holders = holderRows(st.Holders, now)
			for _, i := range st.Instances {
				row.Instances = append(row.Instances, instanceRow{Key: i.Key, Waiters: i.Waiters, Holders: holderRows(i.Holders, now)})
			}
			listLine(ctx, b, row, st)
		}
	}
	out := make([]*semRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out, http.StatusOK
}

// ---- cron ----

// appliedTask decodes the task definition stored at apply: what runs.
func appliedTask(def json.RawMessage) (*spec.CronTask, error) {
	var t spec.CronTask
	if err := json.Unmarshal(def, &t); err != nil {
		return nil, fmt.Errorf("the applied definition is unreadable: %w", err)
	}
	return &t, nil
}

type taskRow struct {
	Name, Backend      string
	Schedule, Timezone string
	Applied            bool
	Differs            bool // the local spec's schedule or zone differs from the applied one
	NextRun            time.Time
	Running            int
	Last               *runRow
	Err                string
	Now                time.Time
	// Pause is an operator's pause (coordd cron pause); PausedInSpec:
	// the applied definition says paused: true.
	Pause        *backends.CronPause
	PausedInSpec bool
}

type runRow struct {
	ScheduledAt time.Time
	Attempt     int
	Status      string
	Exit        string
	Host        string
	StartedAt   time.Time
	FinishedAt  time.Time
	Duration    string
	Lateness    string
	Manual      bool
	Error       string
	RunID       string
	Fencing     int64
	Output      string
	Truncated   bool
	OutputBytes int
	// ShowOutput: the output is shown unfolded (the newest run with output).
	ShowOutput bool
}

// outputTail is how much of a run's output a page shows: its end.
const outputTail = 4 << 10

func newRunRow(r backends.Run, now time.Time) *runRow {
	row := &runRow{ScheduledAt: r.ScheduledAt, Attempt: r.Attempt, Status: r.Status, Host: r.Host, StartedAt: r.StartedAt,
		FinishedAt: r.FinishedAt, Manual: r.Manual, Error: r.Error, RunID: r.RunID, Fencing: r.Fencing, OutputBytes: len(r.Output)}
	switch r.Status {
	case backends.RunSkipped, backends.RunLost:
		row.Exit = "-"
	case backends.RunRunning:
		row.Exit = "running"
	default:
		row.Exit = strconv.Itoa(r.ExitCode)
	}
	switch {
	case r.Status == backends.RunSkipped:
		row.Duration = "-"
	case !r.FinishedAt.IsZero() && !r.StartedAt.IsZero():
		row.Duration = span(r.FinishedAt.Sub(r.StartedAt))
	case r.Status == backends.RunRunning && !r.StartedAt.IsZero():
		row.Duration = span(now.Sub(r.StartedAt)) + " so far"
	default:
		row.Duration = "-"
	}
	// Lateness is that of a scheduled first attempt: a retry waits out its
	// backoff and a manual run is scheduled when it starts.
	row.Lateness = "-"
	if r.Attempt == 1 && !r.Manual && r.Status != backends.RunSkipped && !r.StartedAt.IsZero() {
		row.Lateness = span(max(r.StartedAt.Sub(r.ScheduledAt), 0))
	}
	row.Output, row.Truncated = block(r.Output, outputTail, true)
	return row
}

func (d *Dashboard) cronRows(ctx context.Context, s *spec.Spec, e *reconcile.Engine, names []string) []*taskRow {
	rows := map[string]*taskRow{}
	for _, n := range names {
		t := s.Cron[n]
		rows[n] = &taskRow{Name: n, Backend: t.Backend, Schedule: t.Schedule, Timezone: t.Timezone}
	}
	order, groups := byBackend(names, func(n string) string { return s.Cron[n].Backend })
	for _, bn := range order {
		ns := groups[bn]
		b := e.Backends[bn]
		adm, ok1 := b.(backends.CronAdmin)
		cr, ok2 := b.(backends.Crons)
		var err error
		if !ok1 || !ok2 {
			err = fmt.Errorf("backend %q is not open on this host", bn)
		}
		var now time.Time
		var m map[string]*backends.CronState
		if err == nil {
			now, err = b.Now(ctx)
		}
		if err == nil {
			m, err = adm.ObserveCrons(ctx, ns)
		}
		for _, n := range ns {
			row := rows[n]
			row.Now = now
			if err != nil {
				row.Err = err.Error()
				continue
			}
			st := m[n]
			if st == nil {
				continue
			}
			row.Applied, row.NextRun, row.Running = true, st.NextExec, st.Running
			row.Pause, row.PausedInSpec = st.Paused, backends.DefPaused(st.Def)
			if def, derr := appliedTask(st.Def); derr == nil {
				row.Differs = def.Schedule != row.Schedule || def.Timezone != row.Timezone
				row.Schedule, row.Timezone = def.Schedule, def.Timezone
			}
			h, herr := cr.History(ctx, n, 1)
			if herr != nil {
				row.Err = herr.Error()
				continue
			}
			if len(h) > 0 {
				row.Last = newRunRow(h[0], now)
			}
		}
	}
	out := make([]*taskRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out
}

type cronData struct {
	Tasks   []*taskRow
	Actions []Action
}

func (d *Dashboard) cronPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	return &cronData{Tasks: d.cronRows(ctx, s, e, sortedKeys(s.Cron)), Actions: d.offered(p, spec.KindCron, false)}, http.StatusOK
}

type occRow struct {
	ScheduledAt, StartedAt, ExpiresAt time.Time
	Attempt                           int
	Host, RunID                       string
	Fencing                           int64
	Manual                            bool
}

type taskData struct {
	*taskRow
	Def     *spec.CronTask
	Command string
	Running []occRow
	History []*runRow
	Limit   int
	Actions []Action
}

// commandShown is how much of a task's command its page shows.
const commandShown = 4 << 10

// historyLimit is how many runs the task page lists by default.
const historyLimit = 50

func (d *Dashboard) taskPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	s, e := d.src.Current()
	if s.Cron[name] == nil {
		return nil, http.StatusNotFound
	}
	p.Title = "cron." + name
	p.Nav = "cron"
	td := &taskData{taskRow: d.cronRows(ctx, s, e, []string{name})[0], Limit: min(atoi(r.URL.Query().Get("limit"), historyLimit), 1000), Actions: d.offered(p, spec.KindCron, false)}
	if !td.Applied || td.Err != "" {
		return td, http.StatusOK
	}
	b := e.Backends[td.Backend]
	adm, cr := b.(backends.CronAdmin), b.(backends.Crons)
	if m, err := adm.ObserveCrons(ctx, []string{name}); err == nil && m[name] != nil {
		if def, err := appliedTask(m[name].Def); err == nil {
			td.Def = def
			cmd := def.Command.Shell
			if cmd == "" {
				cmd = strings.Join(quoteArgs(def.Command.Argv), " ")
			}
			td.Command, _ = block([]byte(cmd), commandShown, false)
		}
	}
	running, err := cr.Running(ctx, name)
	if err != nil {
		td.Err = err.Error()
		return td, http.StatusOK
	}
	for _, o := range running {
		td.Running = append(td.Running, occRow{ScheduledAt: o.ScheduledAt, StartedAt: o.StartedAt, ExpiresAt: o.ExpiresAt, Attempt: o.Attempt, Host: o.Host, RunID: o.RunID, Fencing: o.Fencing, Manual: o.Manual})
	}
	h, err := cr.History(ctx, name, td.Limit)
	if err != nil {
		td.Err = err.Error()
		return td, http.StatusOK
	}
	shown := false
	for _, run := range h {
		row := newRunRow(run, td.Now)
		row.ShowOutput = !shown && row.Output != ""
		shown = shown || row.ShowOutput
		td.History = append(td.History, row)
	}
	return td, http.StatusOK
}

// quoteArgs shows an argv as a shell would need it typed.
func quoteArgs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}~#") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// ---- queues ----

type queueRow struct {
	Name, Backend string
	Applied       bool
	Config        backends.QueueConfig
	Ready         int64
	Delayed       int64
	InFlight      int64
	Dead          int64
	Stranded      int64
	Oldest        string
	Trend         trend
	Err           string
	Now           time.Time
}

func (d *Dashboard) queueRows(ctx context.Context, s *spec.Spec, e *reconcile.Engine, names []string) []*queueRow {
	rows := map[string]*queueRow{}
	for _, n := range names {
		rows[n] = &queueRow{Name: n, Backend: s.Queues[n].Backend, Oldest: "-"}
	}
	order, groups := byBackend(names, func(n string) string { return s.Queues[n].Backend })
	for _, bn := range order {
		ns := groups[bn]
		b := e.Backends[bn]
		adm, ok := b.(backends.QueueAdmin)
		var err error
		if !ok {
			err = fmt.Errorf("backend %q is not open on this host", bn)
		}
		var now time.Time
		var m map[string]*backends.QueueState
		if err == nil {
			now, err = b.Now(ctx)
		}
		if err == nil {
			m, err = adm.ObserveQueues(ctx, ns)
		}
		for _, n := range ns {
			row := rows[n]
			row.Now = now
			if err != nil {
				row.Err = err.Error()
				continue
			}
			st := m[n]
			if st == nil {
				continue
			}
			row.Applied, row.Config = true, st.Config
			row.Ready, row.Delayed, row.InFlight, row.Dead, row.Stranded = st.ReadyNow(), st.Delayed, st.InFlight, st.Dead, st.Stranded
			if !st.OldestReady.IsZero() && st.ReadyNow() > 0 {
				row.Oldest = span(max(now.Sub(st.OldestReady), 0))
			}
			row.Trend = d.samples.add(bn+"/"+n, now, st.Ready+st.InFlight, st.Dead)
		}
	}
	out := make([]*queueRow, 0, len(names))
	for _, n := range names {
		out = append(out, rows[n])
	}
	return out
}

func (d *Dashboard) queuesPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	s, e := d.src.Current()
	return d.queueRows(ctx, s, e, sortedKeys(s.Queues)), http.StatusOK
}

type jobRow struct {
	ID          int64
	Key         string
	Partition   int
	Attempt     int
	EnqueuedAt  time.Time
	AvailableAt time.Time
	LastError   string
	Preview     string
	// Size is the whole payload's length; Cut: the preview is not all of it.
	Size int64
	Cut  bool
	// Payload is the payload as the job page shows it (at most
	// payloadShown bytes), More how many bytes it leaves out.
	Payload string
	More    int64
}

type queueData struct {
	*queueRow
	// Query is the search as used (cut to maxQueryBytes and
	// maxQueryWords); QueryCut says it was cut.
	Query    string
	QueryCut bool
	Jobs     []jobRow
	// From and To number the dead jobs read (1-based, in the dead set's
	// order), Matched how many of them match the search; Next and Prev
	// link the next and the previous page, empty at the ends.
	From, To   int
	Matched    int
	Next, Prev string
	// Full: the search stopped at deadPage matches before reading all it
	// could; Scanned: it read deadScan jobs.
	Full    bool
	Scanned bool
	Actions []Action
	Limits  deadLimits
}

// deadLimits are the bounds of the dead set pages, shown on them.
type deadLimits struct {
	Page, Scan, SearchBytes, QueryBytes, QueryWords int
}

// The dead set is read a page at a time (backends.DeadJobReader), each
// payload and last error cut by the backend, so that a page view costs
// the same whatever the payloads weigh and however many jobs are dead.
const (
	// deadPage is how many dead jobs a queue page lists.
	deadPage = 100
	// deadScan is the most dead jobs one search request reads, in batches
	// of deadBatch.
	deadScan  = 5000
	deadBatch = 500
	// searchBytes is how much of each payload and last error a queue page
	// reads: what it lists and what the search looks in.
	searchBytes = 512
	// previewShown is how much of a payload the list shows.
	previewShown = 120
	// payloadShown is how much of one payload the job page reads and shows.
	payloadShown = 64 << 10
	// maxQueryBytes and maxQueryWords bound the search: the rest of a
	// longer query is dropped, and the page says so.
	maxQueryBytes = 200
	maxQueryWords = 10
)

var limits = deadLimits{Page: deadPage, Scan: deadScan, SearchBytes: searchBytes, QueryBytes: maxQueryBytes, QueryWords: maxQueryWords}

func newJobRow(j backends.PartialJob) jobRow {
	payload := wholeRunes(j.Payload, j.Truncated())
	preview, cut := block(payload, previewShown, false)
	return jobRow{ID: j.ID, Key: j.Key, Partition: j.Partition, Attempt: j.Attempt, EnqueuedAt: j.EnqueuedAt, AvailableAt: j.AvailableAt,
		LastError: j.LastError, Preview: strings.Join(strings.Fields(preview), " "), Size: j.PayloadSize, Cut: cut || j.Truncated()}
}

// wholeRunes drops an incomplete UTF-8 sequence that a cut left at the end
// of b, so that it is not shown as invalid bytes.
func wholeRunes(b []byte, cut bool) []byte {
	if !cut {
		return b
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// searchWords is the dead set search of raw: its words, lower case, from
// at most maxQueryBytes of it and at most maxQueryWords of them; cut says
// something was dropped.
func searchWords(raw string) (words []string, cut bool) {
	if len(raw) > maxQueryBytes {
		raw = string(wholeRunes([]byte(raw[:maxQueryBytes]), true))
		cut = true
	}
	words = strings.Fields(strings.ToLower(raw))
	if len(words) > maxQueryWords {
		words, cut = words[:maxQueryWords], true
	}
	return words, cut
}

// matches is the dead set search: the query's words, each found (any
// case) in the job's id, key, or the first searchBytes of its last error
// or payload.
func matches(j backends.PartialJob, words []string) bool {
	if len(words) == 0 {
		return true
	}
	hay := strings.ToLower(strconv.FormatInt(j.ID, 10) + "\x00" + j.Key + "\x00" + j.LastError + "\x00" + string(j.Payload))
	for _, w := range words {
		if !strings.Contains(hay, w) {
			return false
		}
	}
	return true
}

// deadReader is the dashboard's read of queue name's dead set.
func (d *Dashboard) deadReader(name string) (backends.DeadJobReader, error) {
	q, err := d.queue(name)
	if err != nil {
		return nil, err
	}
	dr, ok := q.(backends.DeadJobReader)
	if !ok {
		return nil, fmt.Errorf("the backend of queue %q cannot read its dead jobs a page at a time", name)
	}
	return dr, nil
}

func (d *Dashboard) queuePage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	s, e := d.src.Current()
	if s.Queues[name] == nil {
		return nil, http.StatusNotFound
	}
	p.Title, p.Nav = "queue."+name, "queues"
	words, cut := searchWords(r.URL.Query().Get("q"))
	qd := &queueData{queueRow: d.queueRows(ctx, s, e, []string{name})[0], Query: strings.Join(words, " "), QueryCut: cut,
		Actions: d.offered(p, spec.KindQueue, false), Limits: limits}
	if !qd.Applied || qd.Err != "" {
		return qd, http.StatusOK
	}
	dr, err := d.deadReader(name)
	if err != nil {
		qd.Err = err.Error()
		return qd, http.StatusOK
	}
	at := min(atoi(r.URL.Query().Get("at"), 0), math.MaxInt32)
	off, end := at, false
	if len(words) == 0 {
		jobs, err := dr.DeadPage(ctx, name, at, deadPage, searchBytes)
		if err != nil {
			qd.Err = err.Error()
			return qd, http.StatusOK
		}
		for _, j := range jobs {
			qd.Jobs = append(qd.Jobs, newJobRow(j))
		}
		off, end = at+len(jobs), len(jobs) < deadPage
		qd.Matched = len(jobs)
	} else {
	scan:
		for off-at < deadScan {
			want := min(deadBatch, deadScan-(off-at))
			jobs, err := dr.DeadPage(ctx, name, off, want, searchBytes)
			if err != nil {
				qd.Err = err.Error()
				return qd, http.StatusOK
			}
			for _, j := range jobs {
				off++
				if matches(j, words) {
					qd.Jobs = append(qd.Jobs, newJobRow(j))
					if len(qd.Jobs) == deadPage {
						qd.Full = true
						break scan
					}
				}
			}
			if len(jobs) < want {
				end = true
				break
			}
		}
		qd.Matched = len(qd.Jobs)
		qd.Scanned = !end && !qd.Full
	}
	qd.From, qd.To = at+1, off
	link := func(at int) string {
		v := url.Values{}
		if qd.Query != "" {
			v.Set("q", qd.Query)
		}
		if at > 0 {
			v.Set("at", strconv.Itoa(at))
		}
		if p.Paused {
			v.Set("pause", "1")
		}
		if len(v) == 0 {
			return p.Path
		}
		return p.Path + "?" + v.Encode()
	}
	if !end && off < int(min(qd.Dead, math.MaxInt32)) { // the count read with the page: more may have died since
		qd.Next = link(off)
	}
	qd.Scanned = qd.Scanned && qd.Next != ""
	switch {
	case at > 0 && len(words) > 0:
		qd.Prev = link(0) // a search's pages differ in length: back to the start
	case at > 0:
		qd.Prev = link(max(at-deadPage, 0))
	}
	return qd, http.StatusOK
}

type jobData struct {
	Queue string
	Job   *jobRow
	Err   string
	// Actions act on this job, Bulk on every dead job of the queue.
	Actions []Action
	Bulk    []Action
}

func (d *Dashboard) jobPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	s, _ := d.src.Current()
	if s.Queues[name] == nil || err != nil {
		return nil, http.StatusNotFound
	}
	p.Title, p.Nav = fmt.Sprintf("queue.%s dead job %d", name, id), "queues"
	dr, err := d.deadReader(name)
	if err != nil {
		return &jobData{Queue: name, Err: err.Error()}, http.StatusOK
	}
	j, err := dr.DeadJob(ctx, name, id, payloadShown)
	switch {
	case isNotFound(err):
		return nil, http.StatusNotFound
	case err != nil:
		return &jobData{Queue: name, Err: err.Error()}, http.StatusOK
	}
	row := newJobRow(j)
	shown := wholeRunes(j.Payload, j.Truncated())
	row.Payload, _ = block(shown, payloadShown, false)
	row.More = j.PayloadSize - int64(len(shown))
	return &jobData{Queue: name, Job: &row, Actions: d.offered(p, spec.KindQueue, true), Bulk: d.offered(p, spec.KindQueue, false)}, http.StatusOK
}

// ---- throughput ----

// sampleWindow is how far back the queue samples go.
const sampleWindow = 15 * time.Minute

// sampler keeps, per queue, the backlog (ready, delayed and in-flight
// jobs) and the dead count each time a page read them. coordd stores no
// per-job completion counter (workers are other processes), so the
// dashboard shows what its own readings give: the backlog's trend, by
// backend time, over up to the last 15 minutes.
type sampler struct {
	mu sync.Mutex
	m  map[string][]sample
}

type sample struct {
	at            time.Time
	backlog, dead int64
}

// trend is a queue's backlog change per minute over Span (zero: fewer
// than two readings 10 s apart).
type trend struct {
	Span      time.Duration
	PerMinute float64
	DeadAdded int64
}

// Known reports whether the trend has enough readings.
func (t trend) Known() bool { return t.Span > 0 }

// Text is the trend for a person: "draining 12.0/min" or "growing".
func (t trend) Text() string {
	switch {
	case !t.Known():
		return "-"
	case t.PerMinute > 0.05:
		return fmt.Sprintf("growing %.1f/min", t.PerMinute)
	case t.PerMinute < -0.05:
		return fmt.Sprintf("draining %.1f/min", -t.PerMinute)
	}
	return "steady"
}

func (s *sampler) add(key string, at time.Time, backlog, dead int64) trend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]sample{}
	}
	xs := append(s.m[key], sample{at, backlog, dead})
	for len(xs) > 1 && at.Sub(xs[0].at) > sampleWindow {
		xs = xs[1:]
	}
	if len(xs) > 500 { // many viewers: keep every other reading
		xs = append(xs[:0:0], xs[len(xs)-250:]...)
	}
	s.m[key] = xs
	first := xs[0]
	d := at.Sub(first.at)
	if d < 10*time.Second {
		return trend{}
	}
	return trend{Span: d.Round(time.Second), PerMinute: float64(backlog-first.backlog) / d.Minutes(), DeadAdded: dead - first.dead}
}
