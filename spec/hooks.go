package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Hook is an on_failure hook of a cron task or a queue: a command, a
// webhook, or both, that the leader runs once per failure event (a failed,
// timed-out, lost or missed run; a job moved to the dead set).
type Hook struct {
	// Command runs on the leader with the event in COORDD_EVENT_*
	// variables; nil: none.
	Command *Command          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Timeout bounds the command: SIGTERM, then SIGKILL after KillGrace.
	Timeout time.Duration `json:"timeout"`
	// Webhook is POSTed the event as JSON; nil: none.
	Webhook *Webhook `json:"webhook,omitempty"`
	// MissedAfter (cron tasks): a scheduled time that has not started this
	// long after it is a missed event, as is a time skipped because it was
	// missed (starting_deadline, catch_up).
	MissedAfter time.Duration `json:"missed_after,omitempty"`
}

// Webhook is where a hook POSTs its event. URL and header values may hold
// secrets (a Slack or PagerDuty URL is one): they are read with ${VAR}
// references expanded, and only their redacted form (Shown) is written to
// the store, the plan and the spec hash.
type Webhook struct {
	URL     string            `json:"-"`
	Headers map[string]string `json:"-"`
	// Timeout bounds each attempt; Retries is how many attempts follow a
	// failed one (a network error, a 5xx or 429 answer).
	Timeout time.Duration `json:"timeout"`
	Retries int           `json:"retries"`
}

// Hook defaults and bounds.
const (
	defaultHookTimeout    = time.Minute
	defaultWebhookTimeout = 10 * time.Second
	defaultWebhookRetries = 3
	maxWebhookRetries     = 10
	defaultMissedAfter    = time.Hour
)

// webhookView is a Webhook as stored and hashed: the URL's scheme and host
// and the header names in clear, the rest as a fingerprint.
type webhookView struct {
	URL         string        `json:"url"`
	Headers     []string      `json:"headers,omitempty"`
	Fingerprint string        `json:"fingerprint"`
	Timeout     time.Duration `json:"timeout"`
	Retries     int           `json:"retries"`
}

// MarshalJSON writes the redacted view: a change of the URL or of a
// header's value changes the fingerprint (and so the plan and the spec
// hash) without the value itself leaving the host.
func (w Webhook) MarshalJSON() ([]byte, error) {
	return json.Marshal(webhookView{URL: w.Shown(), Headers: w.headerNames(), Fingerprint: w.fingerprint(), Timeout: w.Timeout, Retries: w.Retries})
}

// Shown is the URL as logs and plans print it: scheme and host, with the
// path, query and credentials left out.
func (w Webhook) Shown() string {
	u, err := url.Parse(w.URL)
	if err != nil || u.Host == "" {
		return "(a URL)"
	}
	s := u.Scheme + "://" + u.Host + "/"
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		s += "…"
	}
	return s
}

func (w Webhook) headerNames() []string {
	names := make([]string, 0, len(w.Headers))
	for k := range w.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// fingerprint is the first 12 hex digits of the SHA-256 of the URL and
// the headers.
func (w Webhook) fingerprint() string {
	h := sha256.New()
	h.Write([]byte(w.URL))
	for _, k := range w.headerNames() {
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(w.Headers[k]))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Summary is the hook in one line, as plan and cron list print it.
func (h *Hook) Summary() string {
	if h == nil {
		return ""
	}
	var parts []string
	if h.Command != nil {
		if h.Command.Argv != nil {
			parts = append(parts, "command "+strings.Join(h.Command.Argv, " "))
		} else {
			parts = append(parts, "command "+h.Command.Shell)
		}
	}
	if h.Webhook != nil {
		parts = append(parts, "webhook "+h.Webhook.Shown()+" ("+h.Webhook.fingerprint()+")")
	}
	if h.MissedAfter > 0 {
		parts = append(parts, "missed_after "+shortDuration(h.MissedAfter))
	}
	return strings.Join(parts, ", ")
}

var (
	hookFields      = []string{"command", "env", "timeout", "webhook", "missed_after"}
	queueHookFields = []string{"command", "env", "timeout", "webhook"}
	webhookFields   = []string{"url", "headers", "timeout", "retries"}
)

// hook reads the on_failure field of fs (a cron task's when cron is true,
// else a queue's); nil when absent.
func (l *loader) hook(fs *fieldSet, cron bool) *Hook {
	n, ok := fs.scalar("on_failure")
	if !ok || isNull(n) {
		return nil
	}
	allowed := queueHookFields
	if cron {
		allowed = hookFields
	}
	hf := l.fields(fs.file, fs.addr+".on_failure", fs.keys["on_failure"], n, allowed, func(name string) string {
		if name == "missed_after" {
			return "missed_after belongs to a cron task's on_failure (a queue has no schedule to miss)"
		}
		return ""
	})
	if hf == nil {
		return nil
	}
	h := &Hook{}
	if hf.has("command") {
		c := l.command(hf)
		h.Command = &c
	}
	h.Env = l.env(hf)
	h.Timeout, _ = hf.duration("timeout", defaultHookTimeout, positive)
	if hf.has("webhook") {
		h.Webhook = l.webhook(hf)
	}
	if cron {
		h.MissedAfter, _ = hf.duration("missed_after", defaultMissedAfter, positive)
	}
	if !hf.has("command") && !hf.has("webhook") {
		hf.l.errAt(hf.file, hf.at, hf.addr, "needs a command, a webhook, or both")
	}
	return h
}

// webhook reads on_failure.webhook: a URL, or a mapping with url,
// headers, timeout and retries. The URL and the header values expand
// ${VAR} references and are secret: no message quotes them.
func (l *loader) webhook(fs *fieldSet) *Webhook {
	n, ok := fs.scalar("webhook")
	if !ok {
		return nil
	}
	w := &Webhook{Timeout: defaultWebhookTimeout, Retries: defaultWebhookRetries}
	var wf *fieldSet
	if n.Kind == yaml.ScalarNode && n.ShortTag() == tagStr {
		wf = &fieldSet{l: l, file: fs.file, addr: fs.addr, at: fs.at, keys: map[string]*yaml.Node{"webhook": fs.keys["webhook"]}, vals: map[string]*yaml.Node{"webhook": n}}
		w.URL = l.webhookURL(wf, "webhook")
		return w
	}
	wf = l.fields(fs.file, fs.addr+".webhook", fs.keys["webhook"], n, webhookFields, nil)
	if wf == nil {
		return nil
	}
	if !wf.has("url") {
		wf.missing("url", ": the http:// or https:// address to POST to")
	} else {
		w.URL = l.webhookURL(wf, "url")
	}
	w.Headers = l.webhookHeaders(wf)
	w.Timeout, _ = wf.duration("timeout", defaultWebhookTimeout, positive)
	w.Retries, _ = wf.intRange("retries", defaultWebhookRetries, 0, maxWebhookRetries)
	return w
}

// webhookURL reads and expands a webhook URL and checks its form.
func (l *loader) webhookURL(fs *fieldSet, name string) string {
	v, checkable, ok := l.expandField(fs, name, true)
	if !ok {
		return ""
	}
	if checkable {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fs.errf(name, "must be an http:// or https:// URL (the value is not shown: it may hold a secret)")
			return ""
		}
	}
	return v
}

// webhookHeaders reads a webhook's headers: names as HTTP allows them,
// values expanded and secret.
func (l *loader) webhookHeaders(fs *fieldSet) map[string]string {
	n, ok := fs.scalar("headers")
	if !ok || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		fs.errf("headers", "must be a mapping of Header-Name: value, got %s", describe(n, true))
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || !validHeaderName(k.Value) {
			l.errAt(fs.file, k, fs.addr+".headers", "a header name holds only letters, digits and !#$%%&'*+-.^_`|~, got %s", describe(k, false))
			continue
		}
		addr := fs.addr + ".headers." + k.Value
		if _, dup := out[k.Value]; dup {
			l.errAt(fs.file, k, fs.addr+".headers", "duplicate header %s", quote(k.Value))
			continue
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != tagStr {
			l.errAt(fs.file, v, addr, "must be a string, got %s", describe(v, true))
			continue
		}
		val, _, ok := l.expand(fs.file, addr, v, v.Value)
		if !ok {
			continue
		}
		if strings.ContainsAny(val, "\r\n\x00") {
			l.errAt(fs.file, v, addr, "must not hold a line break or NUL")
			continue
		}
		out[k.Value] = val
	}
	return out
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

// shortDuration prints d without trailing zero units ("1h", "1h30m",
// "90s" stays "1m30s").
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
