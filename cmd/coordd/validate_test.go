package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestValidateHostileFiles: validate on a directory holding a FIFO and a
// symlink to /dev/zero named like spec files, and a memcached key_prefix
// with a space, exits 1 and names each (it used to hang on the FIFO and
// run out of memory on /dev/zero); a spec with thousands of errors prints
// the first 50 and counts all of them.
func TestValidateHostileFiles(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(a, []byte("backends:\n  db: {type: sqlite}\n  mc: {type: memcached, servers: [\"h:11211\"], key_prefix: \"my app:\"}\ncluster: {backend: db}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "x.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // releases a reader stuck in open (the code before the fix)
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	zero := filepath.Join(dir, "z.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code         int
		stdout, errs string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := c.run("", false, "validate", "-f", dir)
		done <- result{code, out, errs}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("validate has not returned after 30s")
	}
	for _, want := range []string{
		a + ":3:59: backends.mc.key_prefix: must be printable ASCII without spaces",
		fifo + ":1:1: cannot read spec: not a regular file (fifo)",
		zero + ":1:1: cannot read spec: not a regular file (character device)",
		"3 error(s) in " + dir,
	} {
		if !strings.Contains(r.errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errs)
		}
	}
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}

	var b strings.Builder
	b.WriteString("semaphores:\n")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "  s%d: {limit: 0}\n", i)
	}
	p := writeSpec(t, b.String())
	code, _, errs := c.run("", false, "validate", "-f", p)
	if lines := strings.Count(errs, "\n"); code != 1 || lines != 52 ||
		!strings.Contains(errs, "... and 950 more errors") || !strings.HasSuffix(errs, "1000 error(s) in "+p+"\n") {
		t.Errorf("exit %d, %d lines:\n%s", code, lines, errs)
	}
}
