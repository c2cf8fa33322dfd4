package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Action is one thing an operator may do from the dashboard: a button on
// the page of every object of its kind, a POST to
// /actions/KIND/NAME/ACTION. The built-in ones are run now (cron), and
// requeue and purge of the dead set or of one dead job (queues).
// Options.Extra adds more (pause and resume of a task): each gets its
// button, and the login, form-token and same-origin checks and the log
// line of every action, without a change here. KIND in the path is cron,
// queue or semaphore (kindPath).
type Action struct {
	// Kind is the kind of object it acts on.
	Kind spec.Kind
	// Name is the path segment and the name in the action log.
	Name string
	// Label is the button's text.
	Label string
	// Confirm, when set, is the text of a box the form must have ticked:
	// a destructive action takes no single click.
	Confirm string
	// Reason: the form has a reason field, passed to Do and logged.
	Reason bool
	// Job: the action acts on one job of a queue (Kind queue). Its
	// button is on the job's page, and Do gets the job's id in
	// ActionRequest.Job.
	Job bool
	// JobStates are the states of the jobs whose page offers it
	// (backends.JobReady, ...); none: dead jobs only.
	JobStates []string
	// Do performs the action on the object named name. Its text is shown
	// to the operator and logged.
	Do func(ctx context.Context, name string, req ActionRequest) (string, error)
}

// ActionRequest is who asked for an action, and why.
type ActionRequest struct {
	Actor  Actor
	Reason string
	// Job is the job's id, for an action with Job set.
	Job int64
}

// Actor is who did an action, as the action log records it.
type Actor struct {
	// Remote is the address of the connection (a reverse proxy's own,
	// behind one).
	Remote string
	// ForwardedFor is the X-Forwarded-For header as sent: a proxy's word,
	// not checked.
	ForwardedFor string
	// TokenID is the id of the access token the session logged in with.
	TokenID string
}

// ErrActionsDisabled: the daemon runs without --dashboard-actions.
var ErrActionsDisabled = errors.New("dashboard actions are disabled (coordd run --dashboard-actions)")

// builtinActions are the actions over the store's public APIs.
func (d *Dashboard) builtinActions() []Action {
	var out []Action
	if d.runner != nil {
		out = append(out, Action{
			Kind: spec.KindCron, Name: "run", Label: "Run now",
			Do: func(ctx context.Context, name string, _ ActionRequest) (string, error) {
				s, e := d.src.Current()
				t := s.Cron[name]
				if t == nil {
					return "", fmt.Errorf("cron task %q is not declared in this host's spec: %w", name, backends.ErrNotFound)
				}
				b := e.Backends[t.Backend]
				if b == nil || b.Crons() == nil {
					return "", fmt.Errorf("backend %q is not open on this host", t.Backend)
				}
				m, err := b.Crons().ObserveCrons(ctx, []string{name})
				if err != nil {
					return "", err
				}
				if m[name] == nil {
					return "", fmt.Errorf("cron task %q is not applied: %w", name, backends.ErrNotFound)
				}
				if err := d.runner.RunNow(name); err != nil {
					return "", err
				}
				return fmt.Sprintf("cron.%s started on %s as a manual run; its history shows it", name, d.src.HostID()), nil
			},
		})
	}
	dead := func(verb string, op func(backends.Queues) func(context.Context, string) (int64, error)) func(context.Context, string, ActionRequest) (string, error) {
		return func(ctx context.Context, name string, _ ActionRequest) (string, error) {
			q, err := d.queue(name)
			if err != nil {
				return "", err
			}
			n, err := op(q)(ctx, name)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s %d dead jobs of queue.%s", verb, n, name), nil
		}
	}
	job := func(verb string, op func(backends.Queues) func(context.Context, string, int64) error) func(context.Context, string, ActionRequest) (string, error) {
		return func(ctx context.Context, name string, req ActionRequest) (string, error) {
			q, err := d.queue(name)
			if err != nil {
				return "", err
			}
			if err := op(q)(ctx, name, req.Job); err != nil {
				return "", err
			}
			return fmt.Sprintf(verb, req.Job, name), nil
		}
	}
	out = append(out,
		Action{
			Kind: spec.KindQueue, Name: "requeue-job", Label: "Requeue this job", Job: true,
			Do: job("requeued dead job %d of queue.%s", func(q backends.Queues) func(context.Context, string, int64) error { return q.RequeueDeadJob }),
		},
		Action{
			Kind: spec.KindQueue, Name: "purge-job", Label: "Purge this job", Job: true,
			Confirm: "delete this dead job for good",
			Do:      job("purged dead job %d of queue.%s", func(q backends.Queues) func(context.Context, string, int64) error { return q.PurgeDeadJob }),
		},
		Action{
			Kind: spec.KindQueue, Name: "cancel-job", Label: "Cancel this job", Job: true,
			JobStates: []string{backends.JobReady, backends.JobDelayed},
			Confirm:   "delete this job before it runs",
			Do:        job("canceled job %d of queue.%s", func(q backends.Queues) func(context.Context, string, int64) error { return q.CancelJob }),
		},
		Action{
			Kind: spec.KindQueue, Name: "run-job-now", Label: "Run this job now", Job: true,
			JobStates: []string{backends.JobDelayed},
			Do:        job("job %d of queue.%s is ready now", func(q backends.Queues) func(context.Context, string, int64) error { return q.RunJobNow }),
		},
		Action{
			Kind: spec.KindQueue, Name: "requeue-dead", Label: "Requeue all dead jobs",
			Confirm: "make every dead job ready again, attempts reset",
			Do:      dead("requeued", func(q backends.Queues) func(context.Context, string) (int64, error) { return q.RequeueDead }),
		},
		Action{
			Kind: spec.KindQueue, Name: "purge-dead", Label: "Purge all dead jobs",
			Confirm: "delete every dead job for good",
			Do:      dead("purged", func(q backends.Queues) func(context.Context, string) (int64, error) { return q.PurgeDead }),
		},
	)
	return out
}

// actionNameRE is what an action's Name may be: it is a path segment.
var actionNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// checkAction refuses an Options.Extra action that could not be shown or
// reached: see Options.Extra.
func (d *Dashboard) checkAction(a Action) error {
	switch {
	case a.Do == nil || a.Label == "":
		return fmt.Errorf("dashboard action %q: Do and Label are required", a.Name)
	case a.Kind != spec.KindCron && a.Kind != spec.KindQueue:
		return fmt.Errorf("dashboard action %q: kind %q has no page with buttons (cron or queue)", a.Name, a.Kind)
	case !actionNameRE.MatchString(a.Name):
		return fmt.Errorf("dashboard action %q: the name must match %s", a.Name, actionNameRE)
	}
	for _, b := range d.actions {
		if b.Kind == a.Kind && b.Name == a.Name {
			return fmt.Errorf("dashboard action %s.%s is defined twice", pathOfKind(a.Kind), a.Name)
		}
	}
	return nil
}

// queue returns the runtime side of queue name's backend.
func (d *Dashboard) queue(name string) (backends.Queues, error) {
	s, e := d.src.Current()
	local := s.Queues[name]
	if local == nil {
		return nil, fmt.Errorf("queue %q is not declared in this host's spec: %w", name, backends.ErrNotFound)
	}
	b := e.Backends[local.Backend]
	if b == nil || b.Queues() == nil {
		return nil, fmt.Errorf("backend %q is not open on this host, or holds no queues", local.Backend)
	}
	return b.Queues(), nil
}

// actionsFor lists the actions offered on objects of kind.
func (d *Dashboard) actionsFor(kind spec.Kind) []Action {
	var out []Action
	for _, a := range d.actions {
		if a.Kind == kind {
			out = append(out, a)
		}
	}
	return out
}

// kindPath maps the path segment of an action to its kind, and back.
var kindPath = map[string]spec.Kind{"cron": spec.KindCron, "queue": spec.KindQueue, "semaphore": spec.KindSemaphore}

func pathOfKind(k spec.Kind) string {
	for p, kk := range kindPath {
		if kk == k {
			return p
		}
	}
	return string(k)
}

// objectPage is the dashboard page of an object, where an action returns.
func objectPage(k spec.Kind, name string) string {
	switch k {
	case spec.KindCron:
		return "/cron/" + url.PathEscape(name)
	case spec.KindQueue:
		return "/queues/" + url.PathEscape(name)
	}
	return "/semaphores"
}

// handleAction is POST /actions/{kind}/{name}/{action}. It runs an action
// only when actions are enabled, the session is logged in with a token
// still in the token file, the form carries the session's form token, the
// browser does not say the request is cross-site, and a destructive
// action's confirm box is ticked. Every outcome, refusals included, goes
// to the daemon's log with who asked.
func (d *Dashboard) handleAction(w http.ResponseWriter, r *http.Request) {
	kind, name, act := r.PathValue("kind"), r.PathValue("name"), r.PathValue("action")
	what := safe(kind + "." + act)
	actor := Actor{Remote: r.RemoteAddr, ForwardedFor: short(r.Header.Get("X-Forwarded-For"), 200)}
	refused := func(why string) {
		d.log.Warn("dashboard action refused", "action", what, "object", safe(name), "reason", why,
			"remote", actor.Remote, "forwarded_for", actor.ForwardedFor, "token_id", actor.TokenID, "at", time.Now().UTC().Format(time.RFC3339Nano))
	}
	refuse := func(code int, why string) {
		refused(why)
		d.renderError(w, r, code, "Refused: "+why)
	}
	if !d.opts.Actions {
		refuse(http.StatusForbidden, ErrActionsDisabled.Error())
		return
	}
	ses, _ := d.session(r)
	if ses == nil {
		refuse(http.StatusForbidden, "not logged in: log in with an access token first")
		return
	}
	actor.TokenID = ses.tokenID
	if err := sameOrigin(r); err != nil {
		refuse(http.StatusForbidden, "cross-site request: "+err.Error())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		refuse(http.StatusBadRequest, "unreadable form")
		return
	}
	if !sameToken(r.PostForm.Get("csrf"), ses.csrf) {
		refuse(http.StatusForbidden, "missing or wrong form token: reload the page and try again")
		return
	}
	k, ok := kindPath[kind]
	var a *Action
	for i := range d.actions {
		if ok && d.actions[i].Kind == k && d.actions[i].Name == act {
			a = &d.actions[i]
		}
	}
	if a == nil {
		refuse(http.StatusNotFound, "no such action")
		return
	}
	if a.Confirm != "" && r.PostForm.Get("confirm") != "yes" {
		refused("the confirm box was not ticked")
		d.sessions.setFlash(ses, "Not done: tick the box to confirm ("+a.Confirm+").")
		http.Redirect(w, r, objectPage(k, name), http.StatusSeeOther)
		return
	}
	req := ActionRequest{Actor: actor}
	if a.Reason {
		req.Reason = short(r.PostForm.Get("reason"), 500)
	}
	if a.Job {
		id, err := strconv.ParseInt(r.PostForm.Get("job"), 10, 64)
		if err != nil || id <= 0 {
			refuse(http.StatusBadRequest, "no job id in the form")
			return
		}
		req.Job = id
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	start := time.Now()
	msg, err := a.Do(ctx, name, req)
	log := []any{"action", what, "object", safe(name), "remote", actor.Remote, "forwarded_for", actor.ForwardedFor,
		"token_id", actor.TokenID, "at", start.UTC().Format(time.RFC3339Nano)}
	if req.Job != 0 {
		log = append(log, "job", req.Job)
	}
	if req.Reason != "" {
		log = append(log, "reason", req.Reason)
	}
	if err != nil {
		d.log.Warn("dashboard action failed", append(log, "error", err)...)
		d.sessions.setFlash(ses, "Failed: "+err.Error())
	} else {
		d.log.Info("dashboard action", append(log, "result", msg)...)
		d.sessions.setFlash(ses, msg)
	}
	http.Redirect(w, r, objectPage(k, name), http.StatusSeeOther)
}
