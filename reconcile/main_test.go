package reconcile_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines running, such as
// a backend connection an engine forgot to close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
