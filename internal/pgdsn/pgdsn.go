// Package pgdsn reads a PostgreSQL connection string the way libpq and pgx
// do, without a driver: a postgres:// URL or keyword/value pairs
// (host=db1 user=coordd password='a b'). The spec checks a DSN with it
// before any connection is made, and finds the password in it to keep it
// out of messages; the backend hands the string to pgx itself.
package pgdsn

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrSyntax is the error of a DSN that neither form reads.
var ErrSyntax = errors.New("invalid PostgreSQL DSN")

// sslModes are libpq's values of sslmode.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// Span is where a value sits in the DSN: dsn[Start:End].
type Span struct{ Start, End int }

// Settings are a DSN's keywords and values, and where the password is.
type Settings struct {
	Params   map[string]string
	Password Span // zero when the DSN holds none
	URL      bool
}

// Parse reads dsn. Keywords are not checked against libpq's list (pgx
// passes unknown ones to the server as run-time parameters); sslmode is.
func Parse(dsn string) (*Settings, error) {
	var s *Settings
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err = parseURL(dsn)
	} else {
		s, err = parseKeywords(dsn)
	}
	if err != nil {
		return nil, err
	}
	if m, ok := s.Params["sslmode"]; ok {
		valid := false
		for _, v := range sslModes {
			valid = valid || m == v
		}
		if !valid {
			return nil, fmt.Errorf("%w: sslmode %q is not one of %s", ErrSyntax, m, strings.Join(sslModes, ", "))
		}
	}
	return s, nil
}

func parseURL(dsn string) (*Settings, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL, password included
		}
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	s := &Settings{Params: map[string]string{}, URL: true}
	if u.User != nil {
		s.Params["user"] = u.User.Username()
		if p, ok := u.User.Password(); ok {
			s.Params["password"] = p
			start := strings.Index(dsn, "://") + 3
			at := start + strings.LastIndexByte(dsn[start:start+strings.IndexAny(dsn[start:]+"/", "/?#")], '@')
			colon := start + strings.IndexByte(dsn[start:at], ':')
			s.Password = Span{colon + 1, at}
		}
	}
	if u.Host != "" {
		s.Params["host"] = u.Host
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		s.Params["dbname"] = db
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", ErrSyntax, err)
	}
	for k, v := range q {
		s.Params[k] = v[len(v)-1]
	}
	return s, nil
}

// parseKeywords reads "k=v k2='v 2'": a value is a run of characters up
// to a space, or a single-quoted string; a backslash escapes the next
// character in either.
func parseKeywords(dsn string) (*Settings, error) {
	s := &Settings{Params: map[string]string{}}
	i := 0
	skip := func() {
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
	}
	for skip(); i < len(dsn); skip() {
		start := i
		for i < len(dsn) && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		key := dsn[start:i]
		skip()
		if i >= len(dsn) || dsn[i] != '=' || key == "" {
			return nil, fmt.Errorf("%w: %q is not keyword=value (or give a postgres:// URL)", ErrSyntax, key)
		}
		i++
		skip()
		var val strings.Builder
		vStart := i
		if i < len(dsn) && dsn[i] == '\'' {
			i++
			vStart = i
			closed := false
			for i < len(dsn) {
				c := dsn[i]
				if c == '\\' && i+1 < len(dsn) {
					val.WriteByte(dsn[i+1])
					i += 2
					continue
				}
				if c == '\'' {
					closed = true
					break
				}
				val.WriteByte(c)
				i++
			}
			if !closed {
				return nil, fmt.Errorf("%w: the value of %s has no closing quote", ErrSyntax, key)
			}
			if key == "password" {
				s.Password = Span{vStart, i}
			}
			i++
		} else {
			for i < len(dsn) && !isSpace(dsn[i]) {
				if dsn[i] == '\\' && i+1 < len(dsn) {
					i++
				}
				val.WriteByte(dsn[i])
				i++
			}
			if key == "password" {
				s.Password = Span{vStart, i}
			}
		}
		s.Params[key] = val.String()
	}
	return s, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Redact returns dsn with its password replaced by "****", or the whole
// DSN hidden when it does not parse (it might hold a password anywhere).
func Redact(dsn string) string {
	s, err := Parse(dsn)
	if err != nil {
		return "(a PostgreSQL DSN that does not parse)"
	}
	if s.Password.End <= s.Password.Start {
		return dsn
	}
	return dsn[:s.Password.Start] + "****" + dsn[s.Password.End:]
}
