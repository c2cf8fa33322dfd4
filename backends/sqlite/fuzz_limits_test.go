package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
)

// FuzzLimits: the store accepts exactly the keys, payloads and host ids
// the shared limits accept, and reads them back byte for byte (before
// issue 14 it stored a 300-byte or invalid UTF-8 key, and any host id).
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		return openStore(tb, filepath.Join(tb.TempDir(), "coordd.db"), backends.Options{Version: "0.1.0"})
	})
}
