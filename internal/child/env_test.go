package child

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnsetEnv: variables named in Unset reach neither the command nor,
// with a shim, the shim between coordd and the command; an explicit Env
// entry still does. The command prints its own environment and its
// parent's (the shim's, or the test binary's without one).
func TestUnsetEnv(t *testing.T) {
	t.Setenv("COORDD_CHILD_SECRET", "pw-in-env")
	t.Setenv("COORDD_CHILD_KEEP", "kept")
	t.Setenv("COORDD_CHILD_OVERRIDE", "pw-overridden")
	var out bytes.Buffer
	r := run(t, Spec{
		Shell:  `env; echo ---; tr '\0' '\n' < /proc/$PPID/environ`,
		Unset:  []string{"COORDD_CHILD_SECRET", "COORDD_CHILD_OVERRIDE", "COORDD_CHILD_NOT_SET"},
		Env:    []string{"COORDD_CHILD_OVERRIDE=explicit"},
		Stdout: &out,
	})
	if ExitCode(r) != 0 {
		t.Fatalf("result %+v", r)
	}
	own, parent, _ := strings.Cut(out.String(), "---\n")
	if strings.Contains(own, "pw-in-env") || strings.Contains(own, "pw-overridden") {
		t.Errorf("the command inherited an unset variable:\n%s", own)
	}
	if !strings.Contains(own, "COORDD_CHILD_KEEP=kept\n") || !strings.Contains(own, "COORDD_CHILD_OVERRIDE=explicit\n") {
		t.Errorf("the command lacks a kept or explicit variable:\n%s", own)
	}
	if testShim != "" && strings.Contains(parent, "pw-in-env") {
		t.Errorf("the shim inherited an unset variable:\n%s", parent)
	}
}

// TestResolve: the check `queue work` makes before it claims a job, and
// the failure it cannot see (a #! interpreter that does not exist), which
// Start reports as not found.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	noX := filepath.Join(dir, "nox")
	if err := os.WriteFile(noX, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badInterp := filepath.Join(dir, "badinterp")
	if err := os.WriteFile(badInterp, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		want  error
	}{
		{"sh", nil},
		{"/bin/sh", nil},
		{badInterp, nil},
		{"", ErrNotFound},
		{"coordd-no-such-command-xyz", ErrNotFound},
		{filepath.Join(dir, "missing"), ErrNotFound},
		{"./coordd-no-such-command-xyz", ErrNotFound},
		{noX, ErrNotExecutable},
		{dir, ErrNotExecutable},
	} {
		_, err := Resolve(tc.argv0)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Resolve(%q) = %v, want %v", tc.argv0, err, tc.want)
		}
	}
	_, err := start(context.Background(), Spec{Argv: []string{badInterp}})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("start with a missing interpreter: %v, want ErrNotFound", err)
	}
}
