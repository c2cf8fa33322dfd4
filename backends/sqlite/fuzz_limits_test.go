package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
)

// FuzzLimits: the store accepts exactly the keys, payloads and host ids
// the shared limits accept, and reads them back byte for byte; a key of 300 bytes or of invalid
// UTF-8, and a host id the limits refuse, are never stored.
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		return openStore(tb, filepath.Join(tb.TempDir(), "coordd.db"), backends.Options{Version: "0.1.0"})
	})
}
