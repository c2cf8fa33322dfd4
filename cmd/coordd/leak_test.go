package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/coordd/coordd/internal/child"
)

// TestMain runs the test binary as a child shim when started as one, and as
// coordd itself when COORDD_TEST_AS_MAIN is set, so process tests exec real
// coordd processes without a separate build. Otherwise it runs the tests and
// fails on leaked goroutines.
func TestMain(m *testing.M) {
	// Like main: the test binary is the shim of the commands it runs.
	child.MaybeRunShim()
	if os.Getenv("COORDD_TEST_AS_MAIN") == "1" {
		main()
		return
	}
	// A race-enabled binary that exits 0 sleeps a second first; the
	// shims and coordd processes this binary runs need not.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}
