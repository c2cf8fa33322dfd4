package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Load and fails the test if it has not returned after a
// generous deadline (a FIFO's open blocks for ever; nothing here is a
// timing assertion). It returns the Errors, nil on success.
func loadWithin(t *testing.T, path string) Errors {
	t.Helper()
	type result struct {
		s   *Spec
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Load(path, LoadOptions{Getenv: testEnv, DataDir: "/data"})
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return nil
		}
		if r.s != nil {
			t.Errorf("got a spec along with an error")
		}
		var errs Errors
		if !errors.As(r.err, &errs) {
			t.Fatalf("error is %T, want Errors: %v", r.err, r.err)
		}
		return errs
	case <-time.After(30 * time.Second):
		t.Fatalf("Load(%s) has not returned after 30s", path)
		return nil
	}
}

// errorAt returns the error reported at FILE:1:1 for file, or nil.
func errorAt(errs Errors, file string) *Error {
	for _, e := range errs {
		if e.Pos == (Pos{file, 1, 1}) {
			return e
		}
	}
	return nil
}

// mkfifo makes a FIFO at path, and on cleanup opens its write end once so
// that a reader stuck in open (the code before the fix) is released.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// TestLoadRefusesFIFO: a FIFO named like a spec file, in a directory or
// given as the path, is reported as not a regular file; it used to hang
// validate and the daemon's reload in open(2).
func TestLoadRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	writeSpec(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 1}\n")
	fifo := filepath.Join(dir, "x.yaml")
	mkfifo(t, fifo)
	for _, path := range []string{dir, fifo} {
		errs := loadWithin(t, path)
		e := errorAt(errs, fifo)
		if len(errs) != 1 || e == nil || e.Msg != "cannot read spec: not a regular file (fifo)" || !errors.Is(errs, ErrNotRegular) {
			t.Errorf("Load(%s) = %v; want one error at %s:1:1: not a regular file (fifo)", path, errs, fifo)
		}
	}
}

// TestLoadRefusesDevice: a symlink to /dev/zero is refused before any byte
// is read; reading it used to grow a buffer until coordd was killed for
// lack of memory.
func TestLoadRefusesDevice(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "z.yaml")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, link} {
		errs := loadWithin(t, path)
		e := errorAt(errs, link)
		if len(errs) != 1 || e == nil || e.Msg != "cannot read spec: not a regular file (character device)" || !errors.Is(errs, ErrNotRegular) {
			t.Errorf("Load(%s) = %v; want one error at %s:1:1: not a regular file (character device)", path, errs, link)
		}
	}
}

// TestLoadFollowsSymlinksToFiles: deployments link spec files and
// directories; what the links lead to is read as usual.
func TestLoadFollowsSymlinksToFiles(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, filepath.Join(real, "sems.yaml"), "semaphores:\n  s: {limit: 1}\n")
	dir := filepath.Join(root, "conf.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "sems.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink(dir, current); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, current, filepath.Join(dir, "a.yaml")} {
		if errs := loadWithin(t, path); errs != nil {
			t.Errorf("Load(%s): %v", path, errs)
		}
	}
}

func writeSpec(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sparse makes a file of size zero bytes without writing them.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	if err := sparseFile(path, size); err != nil {
		t.Fatal(err)
	}
}

// TestLoadTooLarge: a file over MaxFileSize, and the file that takes a
// directory over MaxTotalSize, are refused by size, unread; LoadFiles
// applies the same limits.
func TestLoadTooLarge(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	sparse(t, big, MaxFileSize+1)
	errs := loadWithin(t, big)
	if len(errs) != 1 || errorAt(errs, big) == nil || !errors.Is(errs, ErrTooLarge) ||
		errs[0].Msg != fmt.Sprintf("cannot read spec: spec too large: %d bytes, more than 8 MiB", MaxFileSize+1) {
		t.Errorf("oversize file: %v", errs)
	}

	// Zeros are invalid YAML, found at the first byte: a.yaml and b.yaml
	// are read and reported as such, c.yaml goes over the total.
	dir = t.TempDir()
	for _, n := range []string{"a.yaml", "b.yaml", "c.yaml"} {
		sparse(t, filepath.Join(dir, n), MaxTotalSize/3+1)
	}
	errs = loadWithin(t, dir)
	c := errorAt(errs, filepath.Join(dir, "c.yaml"))
	if len(errs) != 3 || c == nil || !errors.Is(c, ErrTooLarge) || !strings.Contains(c.Msg, "the files of a spec together hold at most 16 MiB") ||
		!strings.Contains(errs[0].Msg, "invalid YAML") || !strings.Contains(errs[1].Msg, "invalid YAML") {
		t.Errorf("over the total: %v", errs)
	}

	_, err := LoadFiles(map[string][]byte{"a.yaml": make([]byte, MaxFileSize+1)}, LoadOptions{})
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "a.yaml:1:1: spec too large") {
		t.Errorf("LoadFiles: %v", err)
	}
}

// TestLoadTooManyObjects: the object past MaxObjects is reported, once,
// at its name, and neither it nor any after it is decoded.
func TestLoadTooManyObjects(t *testing.T) {
	var b strings.Builder
	b.WriteString("semaphores:\n")
	for i := 0; i <= MaxObjects; i++ {
		fmt.Fprintf(&b, "  s%d: {limit: 1}\n", i)
	}
	b.WriteString("queues:\n  q: {partitions: 0}\n") // past the cap: not decoded
	_, err := LoadFiles(map[string][]byte{"a.yaml": []byte(b.String())}, LoadOptions{DataDir: "/data"})
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs.Count() != 1 || !errors.Is(errs[0], ErrTooManyObjects) {
		t.Fatalf("err = %v", err)
	}
	want := fmt.Sprintf("a.yaml:%d:3: semaphore.s%d: too many objects: a spec holds at most %d", MaxObjects+2, MaxObjects, MaxObjects)
	if !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("got %v, want prefix %q", errs[0], want)
	}
}

// TestTooManyErrors: a spec with thousands of mistakes returns the first
// MaxErrors by position, then one entry that counts the rest and points at
// the next one.
func TestTooManyErrors(t *testing.T) {
	const n = 1000
	var a, b strings.Builder
	a.WriteString("semaphores:\n")
	b.WriteString("queues:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&a, "  s%04d: {limit: 0}\n", i)
		fmt.Fprintf(&b, "  q%04d: {partitions: 0}\n", i)
	}
	_, err := LoadFiles(map[string][]byte{"a.yaml": []byte(a.String()), "b.yaml": []byte(b.String())}, LoadOptions{DataDir: "/data"})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	if len(errs) != MaxErrors+1 || errs.Count() != 2*n {
		t.Fatalf("got %d entries counting %d errors, want %d counting %d", len(errs), errs.Count(), MaxErrors+1, 2*n)
	}
	for i, e := range errs[:MaxErrors] {
		if want := fmt.Sprintf("a.yaml:%d:18: semaphore.s%04d.limit: must be at least 1", i+2, i); !strings.HasPrefix(e.Error(), want) {
			t.Fatalf("error %d = %v, want prefix %q", i, e, want)
		}
	}
	last := errs[MaxErrors]
	want := fmt.Sprintf("a.yaml:%d:18: ... and %d more errors (only the first %d are shown", MaxErrors+2, 2*n-MaxErrors, MaxErrors)
	if !strings.HasPrefix(last.Error(), want) || !errors.Is(err, ErrTooManyErrors) {
		t.Errorf("last = %v, want prefix %q", last, want)
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != MaxErrors+1 {
		t.Errorf("Error() prints %d lines", lines)
	}
}

// TestSyntaxErrorInLargeFile: a syntax error at the end of a large file is
// located at its line with a few re-parses (the bisection used to re-parse
// the whole file about twenty times), and within syntaxBudget bytes.
func TestSyntaxErrorInLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("semaphores:\n")
	for i := 0; b.Len() < 512<<10; i++ {
		fmt.Fprintf(&b, "  s%d: {limit: 1}\n", i)
	}
	lines := strings.Count(b.String(), "\n")
	probes, parsed := 0, 0
	parsePrefix = func(d []byte) error { probes++; parsed += len(d); return parseAll(d) }
	defer func() { parsePrefix = parseAll }()
	check := func(name, src string, wantLine, maxProbes int) {
		t.Helper()
		probes, parsed = 0, 0
		_, err := LoadFiles(map[string][]byte{"a.yaml": []byte(src)}, LoadOptions{DataDir: "/data"})
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Msg, "invalid YAML") {
			t.Fatalf("%s: err = %v", name, err)
		}
		if errs[0].Pos.Line != wantLine {
			t.Errorf("%s: line %d, want %d", name, errs[0].Pos.Line, wantLine)
		}
		if probes > maxProbes || parsed > syntaxBudget {
			t.Errorf("%s: %d re-parses of %d bytes in all; want at most %d within %d", name, probes, parsed, maxProbes, syntaxBudget)
		}
	}
	// The parser blames line 1 (the semaphores mapping); the mistake is
	// the last line.
	check("bad indentation", b.String()+"  x:\n    limit: 1\n   lease: 2s\n", lines+3, 10)
	// The parser's line is exact for a scanner error: one re-parse.
	check("tab", b.String()+"\tx: {limit: 1}\n", lines+1, 1)
	// With the budget spent at once, the answer is the line where the
	// parser stopped reading: the last one here, and no re-parse.
	syntaxBudget = 0
	defer func() { syntaxBudget = 16 << 20 }()
	check("no budget", b.String()+"  x:\n    limit: 1\n   lease: 2s\n", lines+3, 0)
}
