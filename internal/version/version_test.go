package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })

	Version, Commit = "1.2.3", "abc123"
	want := "coordd 1.2.3 (commit abc123, " + runtime.Version() + ")"
	if got := String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}

	Commit = ""
	if got := String(); !strings.Contains(got, "commit unknown") {
		t.Fatalf("String() with empty Commit = %q, want it to say 'commit unknown'", got)
	}
}
