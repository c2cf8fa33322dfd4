package mysql_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/internal/testenv"
)

// FuzzLimits: the server accepts exactly the keys, payloads and host ids
// the shared limits accept, and reads them back byte for byte; a refused
// one fails with the limits' sentinel, not a raw driver error (before
// issue 14, a 300-byte key was error 1406, invalid UTF-8 error 1366).
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		return openStore(tb, testenv.MySQLDSN(tb), "coordd_", backends.Options{Version: "0.1.0"})
	})
}
