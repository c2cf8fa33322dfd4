package daemon_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/spec"
)

// TestNewChecksHostID: the host id names the daemon's records in every
// backend (leader holder, host record, holders, cron runs), so New refuses
// an invalid one before it reads the spec or opens a backend.
func TestNewChecksHostID(t *testing.T) {
	for _, id := range []string{"", "a\n\x1b[2J", "web 1"} {
		_, err := daemon.New(context.Background(), daemon.Config{SpecPath: filepath.Join(t.TempDir(), "none.yaml"), HostID: id})
		if !errors.Is(err, spec.ErrInvalidHostID) {
			t.Errorf("New with host id %q: %v, want spec.ErrInvalidHostID", id, err)
		}
	}
}
