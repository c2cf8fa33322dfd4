package dashboard

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Errors of the token file.
var (
	// ErrTokenFile: the token file cannot be used (unreadable, readable
	// by every user, malformed, or without a token).
	ErrTokenFile = errors.New("bad dashboard token file")
)

// MinTokenLen is the shortest secret a token file may hold: 16 bytes of
// a random string cannot be guessed through a login form.
const MinTokenLen = 16

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

// Cookie names. Both are HttpOnly and SameSite=Strict: a page of another
// site can neither read them nor make the browser send them with a POST.
const (
	sessionCookie = "coordd_session"
	loginCookie   = "coordd_login"
)

var tokenIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

// token is one line of the token file. Only the secret's hash is kept.
type token struct {
	id  string
	sum [32]byte
}

// tokenFile is the access token file, read again when it changes, so that
// removing a line revokes the token and ends its sessions.
type tokenFile struct {
	path string

	mu     sync.Mutex
	mod    time.Time
	size   int64
	tokens []token
}

// loadTokens reads path: one token a line, "ID:SECRET", # comments and
// blank lines ignored. The file must not be readable by every user.
func loadTokens(path string) ([]token, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("%w: %s is accessible to every user (mode %v); chmod o= it", ErrTokenFile, path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	var out []token
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, secret, ok := strings.Cut(line, ":")
		id, secret = strings.TrimSpace(id), strings.TrimSpace(secret)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %s:%d: want ID:SECRET", ErrTokenFile, path, n)
		case !tokenIDRE.MatchString(id):
			return nil, fmt.Errorf("%w: %s:%d: the token id must be 1 to 64 of A-Z a-z 0-9 _ . @ -", ErrTokenFile, path, n)
		case len(secret) < MinTokenLen:
			return nil, fmt.Errorf("%w: %s:%d: token %s: the secret must be at least %d characters (openssl rand -hex 32 makes one)", ErrTokenFile, path, n, id, MinTokenLen)
		case seen[id]:
			return nil, fmt.Errorf("%w: %s:%d: token id %s appears twice", ErrTokenFile, path, n, id)
		}
		seen[id] = true
		out = append(out, token{id: id, sum: sha256.Sum256([]byte(secret))})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no token", ErrTokenFile, path)
	}
	return out, nil
}

// current returns the tokens, reading the file again when its size or
// modification time changed. A file that became unusable keeps the last
// good tokens and returns the error too (the caller logs it).
func (f *tokenFile) current() ([]token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFile, err) // a removed file revokes every token
	}
	if fi.ModTime().Equal(f.mod) && fi.Size() == f.size && f.tokens != nil {
		return f.tokens, nil
	}
	ts, err := loadTokens(f.path)
	if err != nil {
		return nil, err
	}
	f.mod, f.size, f.tokens = fi.ModTime(), fi.Size(), ts
	return ts, nil
}

// match returns the id of the token whose secret is given, comparing every
// token's hash in constant time.
func match(ts []token, secret string) (string, [32]byte, bool) {
	sum := sha256.Sum256([]byte(secret))
	id, found := "", false
	for _, t := range ts {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			id, found = t.id, true
		}
	}
	return id, sum, found
}

// valid reports whether a token with this id and hash is still in ts.
func valid(ts []token, id string, sum [32]byte) bool {
	for _, t := range ts {
		if t.id == id && t.sum == sum {
			return true
		}
	}
	return false
}

// session is one login. The CSRF token goes in every form of its pages;
// a POST without it is refused.
type session struct {
	tokenID string
	sum     [32]byte
	csrf    string
	expires time.Time
	flash   string // a message for the next page, shown once
}

// sessions are kept in memory: a login belongs to one daemon, and a
// restart ends every one.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
	// failures counts failed logins per client address (clientOf) in
	// its current minute, to slow guessing down (the secrets are long
	// enough not to be guessed): one address that fails locks out itself,
	// never the operators on other addresses.
	failures map[string]*failWindow
}

// failWindow is one client address's failed logins since start.
type failWindow struct {
	start time.Time
	n     int
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxFailures is how many failed logins a daemon takes per minute from
// one client address; maxTracked bounds the addresses it counts (the
// oldest count is dropped for a new one).
const (
	maxFailures = 20
	maxTracked  = 4096
)

// clientOf is the address failed logins are counted by: the connection's
// IP, an IPv6 one by its /64 (one host usually holds a whole /64). Behind
// a reverse proxy every client has the proxy's address.
func clientOf(remoteAddr string) string {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// failed counts a failed login from client.
func (s *sessions) failed(client string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures == nil {
		s.failures = map[string]*failWindow{}
	}
	w := s.failures[client]
	if w == nil || now.Sub(w.start) > time.Minute {
		if w == nil && len(s.failures) >= maxTracked {
			s.dropOldFailures(now)
		}
		w = &failWindow{start: now}
		s.failures[client] = w
	}
	w.n++
}

// dropOldFailures drops the windows over a minute old, or the oldest one
// when none is.
func (s *sessions) dropOldFailures(now time.Time) {
	var oldest string
	for c, w := range s.failures {
		if now.Sub(w.start) > time.Minute {
			delete(s.failures, c)
		} else if oldest == "" || w.start.Before(s.failures[oldest].start) {
			oldest = c
		}
	}
	if len(s.failures) >= maxTracked {
		delete(s.failures, oldest)
	}
}

// throttled reports whether client used up its failed logins for now.
func (s *sessions) throttled(client string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.failures[client]
	return w != nil && now.Sub(w.start) <= time.Minute && w.n >= maxFailures
}

func (s *sessions) create(id string, sum [32]byte, now time.Time) (string, *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m { // drop expired ones
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	key := randomHex(32)
	ses := &session{tokenID: id, sum: sum, csrf: randomHex(32), expires: now.Add(sessionTTL)}
	s.m[key] = ses
	return key, ses
}

func (s *sessions) get(key string, now time.Time) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ses := s.m[key]
	if ses == nil {
		return nil
	}
	if now.After(ses.expires) {
		delete(s.m, key)
		return nil
	}
	return ses
}

func (s *sessions) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// setFlash and takeFlash carry one message from an action to the page
// it redirects to.
func (s *sessions) setFlash(ses *session, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ses.flash = msg
}

func (s *sessions) takeFlash(ses *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := ses.flash
	ses.flash = ""
	return m
}

// setCookie sets a cookie the browser keeps to itself: HttpOnly, SameSite
// Strict, Secure when the page came over HTTPS (directly or, as a reverse
// proxy says, to it).
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	})
}

// sameOrigin refuses a POST that a browser says comes from another site:
// a second line behind the SameSite cookies and the form token. Requests
// without these headers (curl) pass on to the form token check.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("a %s request", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("origin %q", origin)
	}
	if host := r.Header.Get("X-Forwarded-Host"); host != "" && u.Host == host {
		return nil
	}
	if u.Host != r.Host {
		return fmt.Errorf("origin %s is not %s", u.Host, r.Host)
	}
	return nil
}

// sameToken compares two form tokens in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
