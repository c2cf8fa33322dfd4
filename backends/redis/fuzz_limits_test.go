package redis_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/internal/testenv"
)

// FuzzLimits: the server accepts exactly the keys, payloads and host ids
// the shared limits accept, and reads them back byte for byte; a key of 300 bytes or of invalid
// UTF-8, and a host id the limits refuse, never reach the server.
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		url, prefix := testenv.RedisURL(tb)
		return openStore(tb, url, prefix, backends.Options{Version: "0.1.0"})
	})
}
