package spec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/fsblock"
)

// TestLoadRefusesKernelFiles: /proc/kmsg stats as an empty regular file,
// but a read of it waits for the next kernel message for ever (as root),
// and consumes the messages that the system logger is owed. A symlink to
// it named like a spec file wedged validate, coordd run at start and the
// daemon's reloads. Files of the kernel's own file systems are refused by
// name, before they are opened.
func TestLoadRefusesKernelFiles(t *testing.T) {
	dir := t.TempDir()
	writeSpec(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 1}\n")
	for _, target := range []struct{ path, fs string }{
		{"/proc/kmsg", "procfs"},
		{"/proc/self/status", "procfs"},
		{"/sys/kernel/uevent_seqnum", "sysfs"},
	} {
		link := filepath.Join(dir, "k.yaml")
		os.Remove(link)
		if err := os.Symlink(target.path, link); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{dir, link} {
			errs := loadWithin(t, path)
			e := errorAt(errs, link)
			want := "cannot read spec: not a regular file (" + target.fs + ", a kernel file system)"
			if len(errs) != 1 || e == nil || e.Msg != want || !errors.Is(errs, ErrNotRegular) {
				t.Errorf("Load(%s) with %s = %v; want one error at %s:1:1: %s", path, target.path, errs, link, want)
			}
		}
	}
}

// loadCtxWithin runs LoadContext and fails the test if it has not
// returned after a generous bound; it returns the Errors, nil on success.
func loadCtxWithin(t *testing.T, ctx context.Context, path string, opts LoadOptions) Errors {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := LoadContext(ctx, path, opts)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		var errs Errors
		if !errors.As(err, &errs) {
			t.Fatalf("error is %T, want Errors: %v", err, err)
		}
		return errs
	case <-time.After(30 * time.Second):
		t.Fatalf("LoadContext(%s) has not returned after 30s", path)
		return nil
	}
}

// blockedSpec returns a spec directory whose b.yaml blocks in open until
// the test ends, and the blocker.
func blockedSpec(t *testing.T) (dir, blocked string, b *fsblock.Blocker) {
	t.Helper()
	dir = t.TempDir()
	writeSpec(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 1}\n")
	blocked = filepath.Join(dir, "b.yaml")
	writeSpec(t, blocked, "semaphores:\n  t: {limit: 1}\n")
	writeSpec(t, filepath.Join(dir, "c.yaml"), "semaphores:\n  u: {limit: 1}\n")
	return dir, blocked, fsblock.Block(t, blocked)
}

// TestLoadReadTimeout: a file whose open never returns (a hung network
// file system) fails the load at the read deadline, with an error at that
// file; the files after it are not read. A load with a name that leads
// to it directly fails the same way.
func TestLoadReadTimeout(t *testing.T) {
	dir, blocked, _ := blockedSpec(t)
	for _, path := range []string{dir, blocked} {
		errs := loadCtxWithin(t, context.Background(), path, LoadOptions{Getenv: testEnv, DataDir: "/data", ReadTimeout: 100 * time.Millisecond})
		e := errorAt(errs, blocked)
		if len(errs) != 1 || e == nil || !errors.Is(errs, ErrReadTimeout) ||
			e.Msg != "cannot read spec: the file system did not answer within 100ms (a file whose reads block, or a hung network file system)" {
			t.Errorf("Load(%s) = %v; want one error at %s:1:1: no answer within 100ms", path, errs, blocked)
		}
	}
}

// TestLoadInterrupted: the caller's context ending (SIGTERM in the CLI)
// ends a load stuck in the file system at once, whatever the deadline.
func TestLoadInterrupted(t *testing.T) {
	dir, blocked, b := blockedSpec(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := LoadContext(ctx, dir, LoadOptions{Getenv: testEnv, DataDir: "/data", ReadTimeout: time.Hour})
		done <- err
	}()
	b.Opened(t, 30*time.Second)
	cancel()
	var errs Errors
	select {
	case err := <-done:
		errors.As(err, &errs)
	case <-time.After(30 * time.Second):
		t.Fatal("LoadContext has not returned 30s after its context ended")
	}
	e := errorAt(errs, blocked)
	if len(errs) != 1 || e == nil || !errors.Is(errs, context.Canceled) || e.Msg != "cannot read spec: interrupted: context canceled" {
		t.Errorf("got %v; want one error at %s:1:1: interrupted", errs, blocked)
	}
}

// TestStuckReadsBounded: each load that gives up on a stuck file leaves
// its call behind in the kernel; once maxPendingReads are left, a load
// fails at once rather than leave one more, and loads work again when
// the file system answers.
func TestStuckReadsBounded(t *testing.T) {
	dir, blocked, b := blockedSpec(t)
	opts := LoadOptions{Getenv: testEnv, DataDir: "/data", ReadTimeout: 50 * time.Millisecond}
	for i := 0; i < maxPendingReads; i++ {
		if errs := loadCtxWithin(t, context.Background(), blocked, opts); !errors.Is(errs, ErrReadTimeout) {
			t.Fatalf("load %d: %v, want a timeout", i, errs)
		}
	}
	errs := loadCtxWithin(t, context.Background(), filepath.Join(dir, "a.yaml"), opts)
	if len(errs) != 1 || !errors.Is(errs, ErrReadTimeout) || !strings.Contains(errs[0].Msg, "8 earlier reads are still waiting for it") {
		t.Fatalf("with %d reads stuck: %v, want a refusal", maxPendingReads, errs)
	}
	b.Release()
	waitFor(t, "the stuck reads to end", func() bool { return len(pendingReads) == 0 })
	if errs := loadCtxWithin(t, context.Background(), dir, opts); errs != nil {
		t.Errorf("after the file system answered: %v", errs)
	}
}

// waitFor polls cond for up to 30s (a bound, not a measurement).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
