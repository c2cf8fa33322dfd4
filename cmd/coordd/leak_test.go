package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the test binary as coordd itself when COORDD_TEST_AS_MAIN
// is set, so process tests exec real coordd processes without a separate
// build. Otherwise it runs the tests and fails on leaked goroutines.
func TestMain(m *testing.M) {
	if os.Getenv("COORDD_TEST_AS_MAIN") == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}
