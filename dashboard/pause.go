package dashboard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// PauseActions are the Pause and Resume buttons of cron tasks and queues,
// for Options.Extra: `coordd cron pause` and `coordd cron resume`, `coordd
// queue pause` and `coordd queue resume`, from the dashboard. A pause is recorded with src's host id, the backend's time and
// the reason typed in the form (required), and names the dashboard and the
// session's token id; the action log line says who asked, as for every
// action.
func PauseActions(src Source) []Action {
	return []Action{
		{
			Kind: spec.KindCron, Name: "pause", Label: "Pause", Reason: true,
			Do: func(ctx context.Context, name string, req ActionRequest) (string, error) {
				if req.Reason == "" {
					return "", errors.New("a reason is required: say why, for whoever finds the task paused")
				}
				pz, err := cronPauser(src, name)
				if err != nil {
					return "", err
				}
				p, changed, err := pz.PauseCron(ctx, name, src.HostID(), dashboardReason(req))
				if err != nil {
					return "", err
				}
				if !changed {
					return fmt.Sprintf("cron.%s was already paused %s; that pause is kept", name, pauseText(&p)), nil
				}
				return fmt.Sprintf("cron.%s paused %s; no occurrence starts until it is resumed", name, pauseText(&p)), nil
			},
		},
		{
			Kind: spec.KindCron, Name: "resume", Label: "Resume",
			Do: func(ctx context.Context, name string, _ ActionRequest) (string, error) {
				pz, err := cronPauser(src, name)
				if err != nil {
					return "", err
				}
				prev, err := pz.ResumeCron(ctx, name)
				if err != nil {
					return "", err
				}
				m, err := pz.ObserveCrons(ctx, []string{name})
				if err != nil {
					return "", err
				}
				if st := m[name]; st != nil && backends.DefPaused(st.Def) {
					return "", fmt.Errorf("cron.%s stays paused: git says so (paused: true in its applied definition); remove it and apply", name)
				}
				if prev == nil {
					return fmt.Sprintf("cron.%s is not paused; nothing to resume", name), nil
				}
				return fmt.Sprintf("cron.%s resumed (it was paused %s); missed times follow its catch_up", name, pauseText(prev)), nil
			},
		},
		{
			Kind: spec.KindQueue, Name: "pause-queue", Label: "Pause the queue", Reason: true,
			Do: func(ctx context.Context, name string, req ActionRequest) (string, error) {
				if req.Reason == "" {
					return "", errors.New("a reason is required: say why, for whoever finds the queue paused")
				}
				q, err := queueOf(src, name)
				if err != nil {
					return "", err
				}
				p, changed, err := q.PauseQueue(ctx, name, src.HostID(), dashboardReason(req))
				if err != nil {
					return "", err
				}
				if !changed {
					return fmt.Sprintf("queue.%s was already paused %s; that pause is kept", name, pauseText(&p)), nil
				}
				return fmt.Sprintf("queue.%s paused %s; workers claim nothing from it until it is resumed", name, pauseText(&p)), nil
			},
		},
		{
			Kind: spec.KindQueue, Name: "resume-queue", Label: "Resume the queue",
			Do: func(ctx context.Context, name string, _ ActionRequest) (string, error) {
				q, err := queueOf(src, name)
				if err != nil {
					return "", err
				}
				prev, err := q.ResumeQueue(ctx, name)
				if err != nil {
					return "", err
				}
				if prev == nil {
					return fmt.Sprintf("queue.%s is not paused; nothing to resume", name), nil
				}
				return fmt.Sprintf("queue.%s resumed (it was paused %s); workers claim again within a second", name, pauseText(prev)), nil
			},
		},
	}
}

// dashboardReason is a pause's reason as recorded: the operator's, then
// that it came from the dashboard and the session's token id.
func dashboardReason(req ActionRequest) string {
	reason := req.Reason + " (dashboard"
	if req.Actor.TokenID != "" {
		reason += ", token " + req.Actor.TokenID
	}
	return reason + ")"
}

// queueOf is the queues of queue name's backend, as this host's spec
// places it.
func queueOf(src Source, name string) (backends.Queues, error) {
	s, e := src.Current()
	q := s.Queues[name]
	if q == nil {
		return nil, fmt.Errorf("queue %q is not declared in this host's spec: %w", name, backends.ErrNotFound)
	}
	b := e.Backends[q.Backend]
	if b == nil || b.Queues() == nil {
		return nil, fmt.Errorf("backend %q is not open on this host, or holds no queues", q.Backend)
	}
	return b.Queues(), nil
}

// cronPauser is the backend of cron task name, as this host's spec places
// it.
func cronPauser(src Source, name string) (backends.Crons, error) {
	s, e := src.Current()
	t := s.Cron[name]
	if t == nil {
		return nil, fmt.Errorf("cron task %q is not declared in this host's spec: %w", name, backends.ErrNotFound)
	}
	b := e.Backends[t.Backend]
	if b == nil || b.Crons() == nil {
		return nil, fmt.Errorf("backend %q is not open on this host, or cannot pause cron tasks", t.Backend)
	}
	return b.Crons(), nil
}

// pauseText is who paused a task, when and why. The host and the reason
// were written by another host: safe quotes them if need be.
func pauseText(p *backends.CronPause) string {
	return fmt.Sprintf("by %s at %s: %s", safe(p.Host), p.At.UTC().Format(time.RFC3339), safe(p.Reason))
}
