package semaphore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/coordd/coordd/semaphore"
	"github.com/coordd/coordd/spec"
)

// TestNewChecksHost: the host is recorded with every holder and printed by
// `sem status`, so New refuses one outside spec.CheckHostID; before issue
// 14 a host with a newline and terminal escapes was stored as is.
func TestNewChecksHost(t *testing.T) {
	st := newStore(t, t.TempDir(), "s", 1)
	for _, host := range []string{"", "a\n\x1b[2J", "web 1", strings.Repeat("h", spec.MaxHostIDLen+1)} {
		if _, err := semaphore.New(st, host); !errors.Is(err, spec.ErrInvalidHostID) {
			t.Errorf("New(%q): %v, want spec.ErrInvalidHostID", host, err)
		}
	}
}
