package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/coordd/coordd/internal/child"
	"github.com/coordd/coordd/internal/tailbuf"
	"github.com/coordd/coordd/spec"
)

// Deliverer runs a hook for one event: its command, then its webhook.
type Deliverer struct {
	// Client sends webhooks; nil: a client that follows no redirect.
	Client *http.Client
	// UserAgent is sent with each webhook.
	UserAgent string
	// Unset names the variables hook commands must not inherit (the
	// backends' secrets: spec.Spec.ChildEnvUnset).
	Unset func() []string
	// Shim is the executable that guards a hook command's process group
	// (child.Spec.Shim); empty: none.
	Shim string
	// Backoff is the wait before the first retry of a webhook, doubled for
	// each next one; zero: one second.
	Backoff time.Duration
}

// outputKept bounds what a hook command's output adds to its error.
const outputKept = 2 << 10

// Deliver runs h for ev. Both parts run even when the first fails; the
// error joins their errors.
func (d *Deliverer) Deliver(ctx context.Context, h *spec.Hook, ev Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	var errs []error
	if h.Command != nil {
		if err := d.command(ctx, h, ev, body); err != nil {
			errs = append(errs, fmt.Errorf("command: %w", err))
		}
	}
	if h.Webhook != nil {
		if err := d.webhook(ctx, h.Webhook, ev, body); err != nil {
			errs = append(errs, fmt.Errorf("webhook %s: %w", h.Webhook.Shown(), err))
		}
	}
	return errors.Join(errs...)
}

// Variables a hook command gets besides those of the run or the job
// (child.VarTask, child.VarQueue, ...).
const (
	VarEvent     = "COORDD_EVENT"
	VarEventID   = "COORDD_EVENT_ID"
	VarEventKind = "COORDD_EVENT_KIND"
)

// commandEnv is a hook command's environment: the hook's env, then the
// event.
func commandEnv(h *spec.Hook, ev Event, body []byte) []string {
	keys := make([]string, 0, len(h.Env))
	for k := range h.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(keys)+10)
	for _, k := range keys {
		env = append(env, k+"="+h.Env[k])
	}
	env = append(env, VarEvent+"="+string(body), VarEventID+"="+ev.ID, VarEventKind+"="+ev.Kind)
	if ev.Task != "" {
		env = append(env, child.VarTask+"="+ev.Task)
	}
	if ev.ScheduledAt != nil {
		env = append(env, child.VarScheduledAt+"="+ev.ScheduledAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	}
	if ev.RunID != "" {
		env = append(env, child.VarRunID+"="+ev.RunID)
	}
	if ev.Queue != "" {
		env = append(env, child.VarQueue+"="+ev.Queue, child.VarJobID+"="+strconv.FormatInt(ev.JobID, 10))
	}
	if ev.Attempt > 0 {
		env = append(env, child.VarAttempt+"="+strconv.Itoa(ev.Attempt))
	}
	return env
}

// command runs the hook's command to its end or its timeout.
func (d *Deliverer) command(ctx context.Context, h *spec.Hook, ev Event, body []byte) error {
	out := tailbuf.New(outputKept)
	var unset []string
	if d.Unset != nil {
		unset = d.Unset()
	}
	p, err := child.Start(ctx, child.Spec{
		Argv: h.Command.Argv, Shell: h.Command.Shell,
		Env: commandEnv(h, ev, body), Unset: unset,
		Stdout: out, Stderr: out,
		Timeout: h.Timeout, Shim: d.Shim,
	})
	if err != nil {
		return err
	}
	r := p.Wait()
	if code := child.ExitCode(r); code != 0 || r.TimedOut {
		msg := "exit status " + strconv.Itoa(code)
		if r.TimedOut {
			msg = "timed out after " + h.Timeout.String()
		}
		if o := bytes.TrimSpace(out.Bytes()); len(o) > 0 {
			msg += ": " + tail(o)
		}
		return errors.New(msg)
	}
	return nil
}

// errPermanent marks an answer that a retry would not change.
var errPermanent = errors.New("refused")

// webhook POSTs body, retrying a network error, a 5xx or a 429 answer
// up to w.Retries times with a doubling backoff.
func (d *Deliverer) webhook(ctx context.Context, w *spec.Webhook, ev Event, body []byte) error {
	wait := d.Backoff
	if wait <= 0 {
		wait = time.Second
	}
	var err error
	for attempt := 0; ; attempt++ {
		err = d.post(ctx, w, ev, body)
		if err == nil || errors.Is(err, errPermanent) || attempt >= w.Retries {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (then %v)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// post makes one attempt.
func (d *Deliverer) post(ctx context.Context, w *spec.Webhook, ev Event, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: the URL does not parse", errPermanent)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", ev.ID)
	req.Header.Set("X-Coordd-Event", ev.Kind)
	if d.UserAgent != "" {
		req.Header.Set("User-Agent", d.UserAgent)
	}
	for k, v := range w.Headers {
		req.Header.Set(k, v)
	}
	c := d.Client
	if c == nil {
		c = noRedirects
	}
	resp, err := c.Do(req)
	if err != nil {
		// The error of the client names the URL, which may hold a
		// secret: say only what went wrong.
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return fmt.Errorf("no answer within %s", w.Timeout)
		}
		return errors.New("the request failed (connection refused, reset, or no route)")
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout:
		return fmt.Errorf("answered %s", resp.Status)
	default:
		return fmt.Errorf("%w: answered %s", errPermanent, resp.Status)
	}
}

// noRedirects is the default client: a redirect is an answer, not a new
// address to POST the event to.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
