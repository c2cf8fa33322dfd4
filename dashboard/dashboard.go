package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// Source is what the dashboard reads: the daemon it runs in.
type Source interface {
	// Current returns the last good spec and an engine over the daemon's
	// open backends (never closed by the dashboard).
	Current() (*spec.Spec, *reconcile.Engine)
	// HostID is the daemon's --host-id.
	HostID() string
	// Leading returns the daemon's term while it leads.
	Leading() (backends.Term, bool)
}

// Runner is implemented by a Source that can run a cron task now, on its
// host, recorded as a manual run (`coordd cron run`'s path). RunNow starts
// the run and returns; the run goes on in the background.
type Runner interface {
	RunNow(task string) error
}

// Options configure the dashboard: `coordd run` flags.
type Options struct {
	// Actions enables the buttons that change the store (--dashboard-actions);
	// TokenFile (--dashboard-token-file) then holds the access tokens.
	Actions   bool
	TokenFile string
	// Refresh is how often pages reload themselves; default 10s.
	Refresh time.Duration
	// Version is shown in the footer.
	Version string
	// Hosts are the names the dashboard answers to besides IP addresses
	// and localhost (--dashboard-host; the daemon adds the listen
	// address's name): a request with another Host header is refused
	// (host.go). New refuses one that is not a host name.
	Hosts []string
	// Extra are actions beyond the built-in ones, on cron tasks or queues
	// (pause and resume of a task): each becomes a button on the pages of
	// its kind, behind the same login, form token, origin check and log
	// line as the built-in ones (actions.go). New refuses one without a
	// Do or Label, of another kind, or whose Name is not a lowercase path
	// segment or is taken.
	Extra []Action
}

// readTimeout bounds the store reads of one page, and an action.
const readTimeout = 10 * time.Second

// Dashboard is the http.Handler of the dashboard.
type Dashboard struct {
	src    Source
	runner Runner
	opts   Options
	log    hclog.Logger
	mux    *http.ServeMux
	pages  map[string]*template.Template

	tokens   *tokenFile
	sessions sessions
	actions  []Action

	plans   planCache
	samples sampler
	hosts   hostSet
}

//go:embed templates/*.html templates/style.css
var assets embed.FS

// css is the inline style sheet, and cspStyle its hash for the
// Content-Security-Policy, which then allows no other style and no script.
var css, cspStyle = func() (template.CSS, string) {
	b, err := fs.ReadFile(assets, "templates/style.css")
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return template.CSS(b), "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

// New returns the dashboard of src. With opts.Actions it reads the token
// file first: a missing or unusable one is an error (ErrTokenFile).
func New(src Source, opts Options, log hclog.Logger) (*Dashboard, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = 10 * time.Second
	}
	d := &Dashboard{src: src, opts: opts, log: log, sessions: sessions{m: map[string]*session{}}}
	d.runner, _ = src.(Runner)
	var err error
	if d.hosts, err = newHostSet(opts.Hosts); err != nil {
		return nil, err
	}
	switch {
	case opts.Actions && opts.TokenFile == "":
		return nil, fmt.Errorf("--dashboard-actions needs --dashboard-token-file: every action is made by someone who logged in with a token")
	case !opts.Actions && opts.TokenFile != "":
		return nil, fmt.Errorf("--dashboard-token-file is only used with --dashboard-actions")
	case opts.Actions:
		d.tokens = &tokenFile{path: opts.TokenFile}
		if _, err := d.tokens.current(); err != nil {
			return nil, err
		}
	}
	d.actions = d.builtinActions()
	for _, a := range opts.Extra {
		if err := d.checkAction(a); err != nil {
			return nil, err
		}
		d.actions = append(d.actions, a)
	}
	if err := d.parse(); err != nil {
		return nil, err
	}
	d.routes()
	return d, nil
}

// pageNames are the templates that render a whole page each.
var pageNames = []string{"cluster", "semaphores", "cron", "task", "queues", "queue", "job", "rate-limits", "login", "error"}

// titleWord capitalizes a word of ASCII ("ready" -> "Ready").
func titleWord(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func (d *Dashboard) parse() error {
	funcs := template.FuncMap{
		"stamp": stamp, "stampIn": stampIn, "span": span, "rel": rel, "safe": safe, "short": short, "lines": lines,
		"hash": shortHash, "title": titleWord, "maxAttemptErrors": func() int { return backends.MaxAttemptErrors },
	}
	d.pages = map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return fmt.Errorf("dashboard template %s: %w", n, err)
		}
		d.pages[n] = t
	}
	return nil
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.get("cluster", d.clusterPage))
	m.HandleFunc("GET /semaphores", d.get("semaphores", d.semaphoresPage))
	m.HandleFunc("GET /cron", d.get("cron", d.cronPage))
	m.HandleFunc("GET /cron/{name}", d.get("task", d.taskPage))
	m.HandleFunc("GET /queues", d.get("queues", d.queuesPage))
	m.HandleFunc("GET /queues/{name}", d.get("queue", d.queuePage))
	m.HandleFunc("GET /queues/{name}/dead/{id}", d.get("job", d.jobPage))
	m.HandleFunc("GET /queues/{name}/jobs/{id}", d.get("job", d.anyJobPage))
	m.HandleFunc("GET /rate-limits", d.get("rate-limits", d.rateLimitsPage))
	m.HandleFunc("GET /login", d.loginPage)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.logout)
	m.HandleFunc("POST /actions/{kind}/{name}/{action}", d.handleAction)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.renderError(w, r, http.StatusNotFound, "No such page.")
	})
	d.mux = m
}

// ServeHTTP serves the dashboard with headers that keep it to itself: no
// script, no style but its own, no frame, no other site's form target, no
// cache; and only to requests that name it in their Host header.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src "+cspStyle+"; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin: no referrer leaves for another site, and a form POST
	// keeps its Origin header (with no-referrer a browser sends "null").
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !d.hosts.allows(r.Host) {
		d.misdirected(w, r)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Host    string
	Leading bool
	Term    int64
	Version string
	// Refresh is the meta refresh period in seconds; 0 while paused.
	Refresh int
	Paused  bool
	// Forms: the page shows action forms, and so does not refresh itself
	// (a refresh would drop a ticked box or a reason being typed).
	Forms bool
	Path  string
	// Actions: the daemon allows actions; Session is the login, if any.
	Actions bool
	Session *sessionView
	Flash   string
	Read    time.Time
	CSS     template.CSS
	Data    any
}

type sessionView struct {
	TokenID string
	CSRF    string
}

// Link is a dashboard path with escaped segments, keeping the refresh
// pause: Link "/cron" name.
func (p *page) Link(base string, parts ...string) string {
	for _, s := range parts {
		base += "/" + url.PathEscape(s)
	}
	if p.Paused {
		base += "?pause=1"
	}
	return base
}

// actionForm is what the "action" template renders: one button.
type actionForm struct {
	A      Action
	Target string
	CSRF   string
	Job    int64
}

// Form is the form of action a on the object name of its kind.
func (p *page) Form(a Action, name string) actionForm {
	f := actionForm{A: a, Target: "/actions/" + pathOfKind(a.Kind) + "/" + url.PathEscape(name) + "/" + url.PathEscape(a.Name)}
	if p.Session != nil {
		f.CSRF = p.Session.CSRF
	}
	return f
}

// JobForm is the form of action a on job id of queue name.
func (p *page) JobForm(a Action, name string, id int64) actionForm {
	f := p.Form(a, name)
	f.Job = id
	return f
}

// PauseLink and ResumeLink toggle the automatic refresh of this page.
func (p *page) PauseLink() string  { return p.Path + "?pause=1" }
func (p *page) ResumeLink() string { return p.Path }

// newPage fills what every page shows.
func (d *Dashboard) newPage(w http.ResponseWriter, r *http.Request, title, nav string) *page {
	t, leading := d.src.Leading()
	p := &page{
		Title: title, Nav: nav, Host: d.src.HostID(), Leading: leading, Term: t.Term, Version: d.opts.Version,
		Paused: r.URL.Query().Get("pause") == "1", Path: r.URL.EscapedPath(),
		Actions: d.opts.Actions, Read: time.Now(), CSS: css,
	}
	if !p.Paused {
		p.Refresh = max(int(d.opts.Refresh/time.Second), 1)
	}
	if ses, _ := d.session(r); ses != nil {
		p.Session = &sessionView{TokenID: ses.tokenID, CSRF: ses.csrf}
		p.Flash = d.sessions.takeFlash(ses)
	}
	return p
}

// get serves a page whose data load reads: a read that fails is shown on
// the page, never as a broken one.
func (d *Dashboard) get(name string, load func(ctx context.Context, r *http.Request, p *page) (any, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		defer cancel()
		p := d.newPage(w, r, name, name)
		data, code := load(ctx, r, p)
		if code == http.StatusNotFound {
			d.renderError(w, r, code, "No such object in this host's spec.")
			return
		}
		p.Data = data
		if p.Forms {
			p.Refresh = 0
		}
		d.render(w, name, p, http.StatusOK)
	}
}

func (d *Dashboard) render(w http.ResponseWriter, name string, p *page, code int) {
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		d.log.Error("dashboard page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered; the daemon log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (d *Dashboard) renderError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	p := d.newPage(w, r, http.StatusText(code), "")
	p.Refresh = 0
	p.Data = struct {
		Code int
		Msg  string
	}{code, msg}
	d.render(w, "error", p, code)
}

// session returns the request's login, if it has one whose token is still
// in the token file.
func (d *Dashboard) session(r *http.Request) (*session, string) {
	if !d.opts.Actions {
		return nil, ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, ""
	}
	ses := d.sessions.get(c.Value, time.Now())
	if ses == nil {
		return nil, ""
	}
	ts, err := d.tokens.current()
	if err != nil || !valid(ts, ses.tokenID, ses.sum) {
		d.sessions.remove(c.Value) // the token was revoked
		return nil, ""
	}
	return ses, c.Value
}

// loginPage is GET /login: a form for an access token. It sets a cookie
// whose value the form repeats, so that another site cannot log a browser
// in with a token of its own.
func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if !d.opts.Actions {
		d.renderError(w, r, http.StatusNotFound, ErrActionsDisabled.Error())
		return
	}
	p := d.newPage(w, r, "Log in", "login")
	p.Refresh = 0
	nonce := randomHex(16)
	setCookie(w, r, loginCookie, nonce, 600)
	p.Data = struct{ Nonce, Error string }{nonce, loginErrors[r.URL.Query().Get("e")]}
	d.render(w, "login", p, http.StatusOK)
}

// loginErrors are the messages login redirects with (by code, so that a
// link cannot put words on the page).
var loginErrors = map[string]string{
	"token": "That token is not in the token file.",
	"form":  "The login form expired; try again.",
	"slow":  "Too many failed logins from your address: wait a minute.",
}

// login is POST /login: a right token starts a session.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if !d.opts.Actions {
		d.renderError(w, r, http.StatusNotFound, ErrActionsDisabled.Error())
		return
	}
	remote := r.RemoteAddr
	back := func(code string) {
		http.Redirect(w, r, "/login?e="+code, http.StatusSeeOther)
	}
	now, client := time.Now(), clientOf(remote)
	if d.sessions.throttled(client, now) {
		d.log.Warn("dashboard login refused", "reason", "too many failed logins from this address", "remote", remote)
		back("slow")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	c, cerr := r.Cookie(loginCookie)
	if err := r.ParseForm(); err != nil || cerr != nil || sameOrigin(r) != nil || !sameToken(r.PostForm.Get("nonce"), c.Value) {
		d.log.Warn("dashboard login refused", "reason", "no or wrong login form token", "remote", remote)
		back("form")
		return
	}
	ts, err := d.tokens.current()
	if err != nil {
		d.log.Error("dashboard token file", "error", err)
	}
	id, sum, ok := match(ts, strings.TrimSpace(r.PostForm.Get("token")))
	if !ok {
		d.sessions.failed(client, now)
		d.log.Warn("dashboard login refused", "reason", "unknown token", "remote", remote, "forwarded_for", short(r.Header.Get("X-Forwarded-For"), 200))
		back("token")
		return
	}
	key, _ := d.sessions.create(id, sum, now)
	setCookie(w, r, sessionCookie, key, int(sessionTTL/time.Second))
	setCookie(w, r, loginCookie, "", -1)
	d.log.Info("dashboard login", "token_id", id, "remote", remote, "forwarded_for", short(r.Header.Get("X-Forwarded-For"), 200))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout is POST /logout, with the form token like an action.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	ses, key := d.session(r)
	if ses != nil && r.ParseForm() == nil && sameToken(r.PostForm.Get("csrf"), ses.csrf) {
		d.sessions.remove(key)
		d.log.Info("dashboard logout", "token_id", ses.tokenID, "remote", r.RemoteAddr)
	}
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// atoi parses a non-negative integer query value; def when absent or bad.
func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return def
	}
	return n
}
