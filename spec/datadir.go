package spec

import (
	"os"
	"path/filepath"
	"strings"
)

// DefaultDataDir is where the implicit embedded store and default sqlite
// paths live: $COORDD_DATA_DIR, else $STATE_DIRECTORY (set by systemd's
// StateDirectory=; the first entry when it lists several), else
// /var/lib/coordd when running as root, else $XDG_STATE_HOME/coordd or
// ~/.local/state/coordd.
func DefaultDataDir() string {
	if d := os.Getenv("COORDD_DATA_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		first, _, _ := strings.Cut(d, ":")
		if first != "" {
			return first
		}
	}
	if os.Geteuid() == 0 {
		return "/var/lib/coordd"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "coordd")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "coordd")
	}
	return filepath.Join(os.TempDir(), "coordd")
}
