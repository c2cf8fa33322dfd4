package mysql_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/internal/testenv"
)

// FuzzLimits: the server accepts exactly the keys, payloads and host ids
// the shared limits accept, and reads them back byte for byte; a refused
// one fails with the limits' sentinel, not a raw driver error (such as
// error 1406 for a 300-byte key or 1366 for invalid UTF-8).
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		return openStore(tb, testenv.MySQLDSN(tb), "coordd_", backends.Options{Version: "0.1.0"})
	})
}
