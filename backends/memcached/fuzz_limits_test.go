package memcached_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/backendtest"
	"github.com/coordd/coordd/internal/testenv"
)

// FuzzLimits: memcached holds semaphores only, so this checks the host ids
// of holders: accepted exactly when the shared limits accept them, and
// listed byte for byte (a refused host id is never stored).
func FuzzLimits(f *testing.F) {
	backendtest.FuzzLimits(f, func(tb testing.TB) backends.Backend {
		addr, prefix := testenv.MemcachedAddr(tb)
		return openStore(tb, addr, prefix, backends.Options{Version: "0.1.0"})
	})
}
