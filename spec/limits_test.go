package spec

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestCheckHostID(t *testing.T) {
	for _, c := range []struct {
		id   string
		ok   bool
		want string // part of the message when refused
	}{
		{"web1", true, ""},
		{"WEB-1.example.com", true, ""},
		{"0", true, ""},
		{"a_b", true, ""},
		{strings.Repeat("h", MaxHostIDLen), true, ""},
		{strings.Repeat("h", MaxHostIDLen+1), false, "at most 128 bytes, this one has 129"},
		{"", false, "must not be empty"},
		{"-web", false, "starts with a letter or a digit"},
		{".", false, "starts with a letter or a digit"},
		{"web 1", false, `only letters, digits, "_", "." and "-"`},
		{"web1\n", false, `"web1\n"`},
		{"a\n\x1b[2J", false, `"a\n\x1b[2J"`},
		{"é", false, "starts with"},
		{"h\xbf'", false, `"h\xbf'"`},
		{"web:1", false, "only letters"},
		{"h\x00", false, "only letters"},
	} {
		err := CheckHostID(c.id)
		if c.ok {
			if err != nil {
				t.Errorf("CheckHostID(%q) = %v, want nil", c.id, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidHostID) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckHostID(%q) = %v, want ErrInvalidHostID saying %q", c.id, err, c.want)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, c := range []struct {
		key  string
		ok   bool
		want string
	}{
		{"", true, ""},
		{"user:42 / order #7", true, ""},
		{"x'; DROP TABLE t; --", true, ""},
		{"é😀\ufffd\u2028", true, ""},
		{strings.Repeat("k", MaxKeyLen), true, ""},
		{strings.Repeat("a", MaxKeyLen-2) + "é", true, ""},
		{strings.Repeat("a", MaxKeyLen-4) + "😀", true, ""},
		{strings.Repeat("k", MaxKeyLen+1), false, "at most 255 bytes, this one has 256"},
		{strings.Repeat("k", 300), false, "this one has 300"},
		{strings.Repeat("a", MaxKeyLen-1) + "é", false, "this one has 256"},
		{strings.Repeat("a", MaxKeyLen-3) + "😀", false, "this one has 256"},
		{strings.Repeat("a", MaxKeyLen-1) + "\xc3", false, "valid UTF-8, byte 254"},
		{"\xbf'", false, "valid UTF-8, byte 0"},
		{"\xed\xa0\x80", false, "valid UTF-8"},
		{"a\x00b", false, "U+0000"},
		{"a\nb", false, "U+000A"},
		{"\t", false, "U+0009"},
		{"\x1b[2J", false, "U+001B"},
		{"\x7f", false, "U+007F"},
		{"\u009b", false, "U+009B"},
	} {
		err := CheckKey(c.key)
		if c.ok {
			if err != nil {
				t.Errorf("CheckKey(%q) = %v, want nil", c.key, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey saying %q", c.key, err, c.want)
		}
		if len(err.Error()) > 200 {
			t.Errorf("CheckKey(%d bytes): the error quotes too much: %d bytes", len(c.key), len(err.Error()))
		}
	}
}

// TestKeyErrorsNameTheKind: a job key and a semaphore key obey one rule,
// and a refusal says which kind of key it refused.
func TestKeyErrorsNameTheKind(t *testing.T) {
	for _, key := range []string{strings.Repeat("k", 300), "a\nb", "\xbf'"} {
		if err := CheckKey(key); !errors.Is(err, ErrInvalidKey) || !strings.HasPrefix(err.Error(), "invalid job key ") {
			t.Errorf("CheckKey(%q) = %v, want an invalid job key", key, err)
		}
		if err := CheckSemaphoreKey(key); !errors.Is(err, ErrInvalidKey) || !strings.HasPrefix(err.Error(), "invalid semaphore key ") {
			t.Errorf("CheckSemaphoreKey(%q) = %v, want an invalid semaphore key", key, err)
		}
	}
	if err := CheckSemaphoreKey(""); !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), "invalid semaphore key: a keyed semaphore's key must not be empty") {
		t.Errorf("CheckSemaphoreKey(\"\") = %v", err)
	}
	if err := CheckSemaphoreKey("user:42"); err != nil {
		t.Errorf("CheckSemaphoreKey(user:42) = %v", err)
	}
}

// FuzzCheckKey: what CheckKey accepts is exactly the documented rule, and
// its messages stay short and free of raw control bytes.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"", "k", "\xbf'", "a\nb", "\x1b[2J", "\u009b", strings.Repeat("a", MaxKeyLen-1) + "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) <= MaxKeyLen && utf8.ValidString(key) && !strings.ContainsFunc(key, unicode.IsControl)
		err := CheckKey(key)
		if (err == nil) != want {
			t.Fatalf("CheckKey(%q) = %v, want accepted %v", key, err, want)
		}
		if err != nil && (strings.ContainsFunc(err.Error(), unicode.IsControl) || !utf8.ValidString(err.Error())) {
			t.Fatalf("CheckKey(%q): message %q holds raw control bytes or invalid UTF-8", key, err)
		}
	})
}

// FuzzCheckHostID: an accepted host id is printable ASCII that needs no
// quoting anywhere (shell, key, column, terminal).
func FuzzCheckHostID(f *testing.F) {
	for _, s := range []string{"web1", "", "-a", "a\n", strings.Repeat("h", MaxHostIDLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := CheckHostID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidHostID) || strings.ContainsFunc(err.Error(), unicode.IsControl) {
				t.Fatalf("CheckHostID(%q) = %v", id, err)
			}
			return
		}
		if id == "" || len(id) > MaxHostIDLen || strings.ContainsFunc(id, func(r rune) bool {
			return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.' || r == '-'))
		}) {
			t.Fatalf("CheckHostID(%q) accepted it", id)
		}
	})
}
