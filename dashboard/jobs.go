package dashboard

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// A queue's page (GET /queues/NAME) lists its dead jobs a page at a time,
// or those of a search, or with ?state= its ready, delayed or running
// jobs; a job's page (GET /queues/NAME/jobs/ID, and /queues/NAME/dead/ID
// for a dead one) shows its payload. Every read is bounded (see deadPage
// and the constants beside it).

type jobRow struct {
	ID int64
	// State is backends.JobReady, ...; ExpiresAt the lease deadline of a
	// running job.
	State      string
	ExpiresAt  time.Time
	Key        string
	Partition  int
	Attempt    int
	EnqueuedAt time.Time
	// AvailableAt of a dead job is its time of death.
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
	// Errors are the job's failed attempts, oldest first (the job page
	// only).
	Errors []backends.AttemptError
}

type queueData struct {
	*queueRow
	// State is the state listed (dead unless ?state= says otherwise),
	// Tabs the links to each.
	State string
	Tabs  []stateTab
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

// stateTab links the list of one state of a queue's jobs.
type stateTab struct {
	State, Link string
	Count       int64
	On          bool
}

// deadLimits are the bounds of the dead set pages, shown on them.
type deadLimits struct {
	Page, Scan, SearchBytes, QueryBytes, QueryWords int
}

// The dead set is read a page at a time (backends.Queues), each
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
	return jobRow{ID: j.ID, ExpiresAt: j.ExpiresAt, Key: j.Key, Partition: j.Partition, Attempt: j.Attempt, EnqueuedAt: j.EnqueuedAt, AvailableAt: j.AvailableAt,
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

func (d *Dashboard) queuePage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	s, e := d.src.Current()
	if s.Queues[name] == nil {
		return nil, http.StatusNotFound
	}
	state := r.URL.Query().Get("state")
	if state == "" {
		state = backends.JobDead
	}
	if backends.CheckJobState(state) != nil {
		return nil, http.StatusNotFound
	}
	p.Title, p.Nav = "queue."+name, "queues"
	words, cut := searchWords(r.URL.Query().Get("q"))
	if state != backends.JobDead {
		words, cut = nil, false
	}
	qd := &queueData{queueRow: d.queueRows(ctx, s, e, []string{name})[0], State: state, Query: strings.Join(words, " "), QueryCut: cut,
		Actions: d.offered(p, spec.KindQueue, false), Limits: limits}
	qd.tabs(p)
	readCounts(ctx, e, []*queueRow{qd.queueRow})
	if !qd.Applied || qd.Err != "" {
		return qd, http.StatusOK
	}
	dr, err := d.queue(name)
	if err != nil {
		qd.Err = err.Error()
		return qd, http.StatusOK
	}
	at := min(atoi(r.URL.Query().Get("at"), 0), math.MaxInt32)
	var off int
	var end bool
	switch {
	case state != backends.JobDead:
		off, end, err = qd.listState(ctx, dr, name, at)
	case len(words) == 0:
		off, end, err = qd.listDead(ctx, dr, name, at)
	default:
		off, end, err = qd.searchDead(ctx, dr, name, at, words)
	}
	if err != nil {
		qd.Err = err.Error()
		return qd, http.StatusOK
	}
	qd.From, qd.To = at+1, off
	qd.pageLinks(p, at, off, end, len(words) > 0)
	return qd, http.StatusOK
}

// PauseAction reports whether the queue's page offers action name beside
// its pause: Pause while it runs, Resume while it is paused.
func (qd *queueData) PauseAction(name string) bool {
	return (name == "pause-queue" && qd.Pause == nil) || (name == "resume-queue" && qd.Pause != nil)
}

// DeadAction reports whether action name acts on the dead set (every
// queue action but pause and resume).
func (qd *queueData) DeadAction(name string) bool {
	return name != "pause-queue" && name != "resume-queue"
}

// tabs links each state's list, with its count as the page read it.
func (qd *queueData) tabs(p *page) {
	counts := map[string]int64{backends.JobReady: qd.Ready, backends.JobDelayed: qd.Delayed, backends.JobRunning: qd.InFlight, backends.JobDead: qd.Dead}
	for _, st := range backends.JobStates {
		v := url.Values{}
		if st != backends.JobDead {
			v.Set("state", st)
		}
		if p.Paused {
			v.Set("pause", "1")
		}
		link := p.Path
		if len(v) > 0 {
			link += "?" + v.Encode()
		}
		qd.Tabs = append(qd.Tabs, stateTab{State: st, Link: link, Count: counts[st], On: st == qd.State})
	}
}

// listState lists one page of the queue's jobs in qd.State from offset
// at. It returns the offset after the page and whether the list ended.
func (qd *queueData) listState(ctx context.Context, dr backends.Queues, name string, at int) (int, bool, error) {
	jobs, err := dr.JobsPage(ctx, name, backends.JobPage{State: qd.State, Offset: at, Limit: deadPage, Cut: searchBytes})
	if err != nil {
		return at, false, err
	}
	for _, j := range jobs {
		row := newJobRow(j)
		row.State = qd.State
		qd.Jobs = append(qd.Jobs, row)
	}
	qd.Matched = len(jobs)
	return at + len(jobs), len(jobs) < deadPage, nil
}

// listDead lists one page of the dead set from offset at. It returns the
// offset after the page and whether the dead set ended there.
func (qd *queueData) listDead(ctx context.Context, dr backends.Queues, name string, at int) (int, bool, error) {
	jobs, err := dr.DeadPage(ctx, name, at, deadPage, searchBytes)
	if err != nil {
		return at, false, err
	}
	for _, j := range jobs {
		qd.Jobs = append(qd.Jobs, newJobRow(j))
	}
	qd.Matched = len(jobs)
	return at + len(jobs), len(jobs) < deadPage, nil
}

// searchDead reads the dead set from offset at in batches of deadBatch and
// keeps the jobs that match words, until deadPage of them matched (Full),
// deadScan were read (Scanned) or the dead set ended. It returns the offset
// after the last job read and whether the dead set ended; on an error the
// matches so far stay listed.
func (qd *queueData) searchDead(ctx context.Context, dr backends.Queues, name string, at int, words []string) (int, bool, error) {
	off, end := at, false
scan:
	for off-at < deadScan {
		want := min(deadBatch, deadScan-(off-at))
		jobs, err := dr.DeadPage(ctx, name, off, want, searchBytes)
		if err != nil {
			return off, false, err
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
	return off, end, nil
}

// pageLinks links the next page (from off, unless the dead set ended
// there) and the previous one (a search's pages differ in length, so a
// search goes back to its start), keeping the search and the refresh
// pause.
func (qd *queueData) pageLinks(p *page, at, off int, end, search bool) {
	link := func(at int) string {
		v := url.Values{}
		if qd.Query != "" {
			v.Set("q", qd.Query)
		}
		if qd.State != backends.JobDead {
			v.Set("state", qd.State)
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
	total := qd.Dead // the count read with the page: more may have died since
	for _, t := range qd.Tabs {
		if t.On {
			total = t.Count
		}
	}
	if !end && off < int(min(total, math.MaxInt32)) {
		qd.Next = link(off)
	}
	qd.Scanned = qd.Scanned && qd.Next != ""
	switch {
	case at > 0 && search:
		qd.Prev = link(0)
	case at > 0:
		qd.Prev = link(max(at-deadPage, 0))
	}
}

type jobData struct {
	Queue string
	// State is the job's state as read (backends.JobReady, ...).
	State string
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
	dr, err := d.queue(name)
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
	return d.jobData(p, name, j, backends.JobDead), http.StatusOK
}

// anyJobPage is the page of a job in any state.
func (d *Dashboard) anyJobPage(ctx context.Context, r *http.Request, p *page) (any, int) {
	name := r.PathValue("name")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	s, _ := d.src.Current()
	if s.Queues[name] == nil || err != nil {
		return nil, http.StatusNotFound
	}
	p.Title, p.Nav = fmt.Sprintf("queue.%s job %d", name, id), "queues"
	dr, err := d.queue(name)
	if err != nil {
		return &jobData{Queue: name, Err: err.Error()}, http.StatusOK
	}
	j, state, err := dr.JobByID(ctx, name, id, payloadShown)
	switch {
	case isNotFound(err):
		return nil, http.StatusNotFound
	case err != nil:
		return &jobData{Queue: name, Err: err.Error()}, http.StatusOK
	}
	p.Title = fmt.Sprintf("queue.%s %s job %d", name, state, id)
	return d.jobData(p, name, j, state), http.StatusOK
}

// jobData is a job's page: the job, its payload as shown, and the actions
// its state allows.
func (d *Dashboard) jobData(p *page, name string, j backends.PartialJob, state string) *jobData {
	row := newJobRow(j)
	row.State, row.Errors = state, j.Errors
	shown := wholeRunes(j.Payload, j.Truncated())
	row.Payload, _ = block(shown, payloadShown, false)
	row.More = j.PayloadSize - int64(len(shown))
	var acts []Action
	for _, a := range d.offered(p, spec.KindQueue, true) {
		if slices.Contains(a.JobStates, state) || (len(a.JobStates) == 0 && state == backends.JobDead) {
			acts = append(acts, a)
		}
	}
	var bulk []Action
	if state == backends.JobDead {
		bulk = d.offered(p, spec.KindQueue, false)
	}
	return &jobData{Queue: name, State: state, Job: &row, Actions: acts, Bulk: bulk}
}
