package spec

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits on the values that reach a backend at run time without passing
// through the spec loader: host ids (--host-id, the hostname, the Go APIs),
// job keys and payloads. They are one set for every backend, checked before
// any backend is touched (the CLI, the semaphore, queue and leadership
// APIs) and again at the top of each backend's TryAcquire, Heartbeat and
// Push, with these same functions, so that a value one backend stores is
// stored by all of them and a refused one is refused the same way
// everywhere. They fit MySQL's columns: VARCHAR(255) in utf8mb4
// (255 characters, so at least 255 bytes) for keys, host ids and the owner
// tokens built from a host id.
const (
	// MaxNameLen bounds the names of backends, semaphores, cron tasks and
	// queues (the loader's name rule).
	MaxNameLen = 63
	// MaxHostIDLen bounds a host id in bytes. Owner tokens add a pid and a
	// random suffix to it (":4194304:" and 24 hex digits at most) and must
	// still fit a VARCHAR(255).
	MaxHostIDLen = 128
	// MaxKeyLen bounds a job key in bytes (MySQL unique_key VARCHAR(255)).
	MaxKeyLen = 255
	// MaxPayloadCap is the largest max_payload a queue may declare, and so
	// the largest payload any push sends to a backend.
	MaxPayloadCap = 64 << 20
	// MinPriority and MaxPriority bound a job's priority (queue push
	// --priority). 0 is the default; a higher priority is claimed first.
	// The range keeps Redis's ready-set score (id less priority x 2^45)
	// exact in a double.
	MinPriority = -100
	MaxPriority = 100
)

// Sentinel errors of the limits, for errors.Is.
var (
	// ErrInvalidHostID: a host id breaks the host id rule.
	ErrInvalidHostID = errors.New("invalid host id")
	// ErrInvalidKey: a job key or a keyed semaphore's key breaks the key
	// rule. The error's message says which of the two it is.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidPriority: a job's priority is outside MinPriority and
	// MaxPriority.
	ErrInvalidPriority = errors.New("invalid priority")
)

// CheckPriority returns an error wrapping ErrInvalidPriority unless p is
// within MinPriority and MaxPriority.
func CheckPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%w %d: a job's priority is between %d and %d", ErrInvalidPriority, p, MinPriority, MaxPriority)
	}
	return nil
}

// keyError is a refused key: its message names the kind of key, and it
// matches ErrInvalidKey with errors.Is.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }
func (e *keyError) Unwrap() error { return ErrInvalidKey }

// CheckHostID returns an error wrapping ErrInvalidHostID unless id is a
// valid host id: 1 to MaxHostIDLen bytes of ASCII letters, digits, "_", "."
// and "-", starting with a letter or a digit. That is a name that may hold
// uppercase letters, as host names do; like a name, it can be printed,
// logged and put in a key or a column as it is.
func CheckHostID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: it must not be empty", ErrInvalidHostID)
	case len(id) > MaxHostIDLen:
		return fmt.Errorf("%w %s: a host id has at most %d bytes, this one has %d", ErrInvalidHostID, quoteShort(id), MaxHostIDLen, len(id))
	case !isAlnum(id[0]):
		return fmt.Errorf("%w %s: a host id starts with a letter or a digit", ErrInvalidHostID, quoteShort(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return fmt.Errorf(`%w %s: a host id holds only letters, digits, "_", "." and "-"`, ErrInvalidHostID, quoteShort(id))
		}
	}
	return nil
}

// CheckKey returns an error wrapping ErrInvalidKey unless key is a valid
// job key: at most MaxKeyLen bytes of valid UTF-8 without control
// characters (U+0000-U+001F, U+007F-U+009F). The empty key is valid: it
// means no key. Keys come from whoever pushes jobs, so they are data to
// every backend; the rule keeps them storable everywhere and keeps NUL,
// newlines and terminal escapes out of the store.
func CheckKey(key string) error { return checkKey("job key", key) }

// CheckSemaphoreKey returns an error wrapping ErrInvalidKey unless key is
// a valid key of a keyed semaphore: not empty, and within CheckKey's rule.
func CheckSemaphoreKey(key string) error {
	if key == "" {
		return &keyError{msg: "invalid semaphore key: a keyed semaphore's key must not be empty"}
	}
	return checkKey("semaphore key", key)
}

// checkKey checks key against the key rule; what names the kind of key.
func checkKey(what, key string) error {
	fail := func(format string, args ...any) error {
		return &keyError{msg: fmt.Sprintf("invalid %s %s: ", what, quoteShort(key)) + fmt.Sprintf(format, args...)}
	}
	if len(key) > MaxKeyLen {
		return fail("a key has at most %d bytes, this one has %d", MaxKeyLen, len(key))
	}
	for i, r := range key {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				return fail("a key is valid UTF-8, byte %d is not", i)
			}
		}
		if unicode.IsControl(r) {
			return fail("a key holds no control characters, byte %d is %U", i, r)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quoteShort quotes the first bytes of a refused value for an error
// message: escaped (strconv.Quote shows invalid bytes as \x..) and short,
// since the value may be huge or hostile.
func quoteShort(s string) string {
	const max = 40
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + "..."
}
