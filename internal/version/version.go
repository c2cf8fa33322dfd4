// Package version holds the coordd build identity. Version and Commit are
// overridden at link time by `make build`:
//
//	go build -ldflags "-X github.com/coordd/coordd/internal/version.Version=v1.2.3 \
//	    -X github.com/coordd/coordd/internal/version.Commit=abc123" ./cmd/coordd
package version

import (
	"fmt"
	"runtime"
)

// Version is the release version (from `git describe --tags` when built by make).
var Version = "0.1.0-dev"

// Commit is the short git commit the binary was built from; empty when unknown.
var Commit = ""

// String returns a one-line description such as
// "coordd 0.1.0-dev (commit abc123, go1.26.8)".
func String() string {
	commit := Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("coordd %s (commit %s, %s)", Version, commit, runtime.Version())
}
