package pgdsn

import (
	"errors"
	"testing"
)

func TestParseReadsBothForms(t *testing.T) {
	for _, c := range []struct {
		dsn, key, want string
	}{
		{"postgres://u:p%40ss@db1:5432/coordd?sslmode=verify-full", "password", "p@ss"},
		{"postgres://u:pw@db1/coordd?sslmode=require", "dbname", "coordd"},
		{"postgresql://db1/coordd", "host", "db1"},
		{"host=db1 user=coordd password='a b\\'c' dbname=coordd", "password", "a b'c"},
		{"host = db1  sslmode=disable", "host", "db1"},
		{"password=s\\ ecret", "password", "s ecret"},
	} {
		s, err := Parse(c.dsn)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.dsn, err)
			continue
		}
		if got := s.Params[c.key]; got != c.want {
			t.Errorf("Parse(%q)[%s] = %q, want %q", c.dsn, c.key, got, c.want)
		}
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, dsn := range []string{
		"host=db1 password='open",
		"just words",
		"=value",
		"host=db1 sslmode=sometimes",
		"postgres://u:p@db1/x?sslmode=on",
		"postgres://u:p@db1:port/x",
	} {
		if _, err := Parse(dsn); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", dsn, err)
		}
	}
}

func TestRedactHidesThePassword(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:secret@db1/coordd":             "postgres://u:****@db1/coordd",
		"postgres://u@db1/coordd":                    "postgres://u@db1/coordd",
		"host=db1 password=secret user=u":            "host=db1 password=**** user=u",
		"host=db1 password='se cret' user=u":         "host=db1 password='****' user=u",
		"host=db1 password='unterminated secret":     "(a PostgreSQL DSN that does not parse)",
		"postgres://u:p@ss/w@db1/coordd?sslmode=off": "(a PostgreSQL DSN that does not parse)",
	} {
		if got := Redact(dsn); got != want {
			t.Errorf("Redact(%q) = %q, want %q", dsn, got, want)
		}
	}
}
