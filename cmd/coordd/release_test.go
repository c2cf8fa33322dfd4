package main

// A `sem run` release that fails (the store is down for a
// moment) is logged and retried, so the slot is free once the store is
// back rather than when its lease (here 1 m) ends.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

func TestSemRunReleaseRetried(t *testing.T) {
	// A private Redis with an append-only file: killed and started again,
	// it keeps the slot, as a store that is briefly unreachable would. It
	// fsyncs every write and has no replica, so it is declared durable:
	// its restart holds no semaphore.
	srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	c := newCLI(t)
	p := writeSpec(t, fmt.Sprintf("backends:\n  r: {type: redis, url: %q, key_prefix: \"t:\", durable: true}\nsemaphores:\n  s: {limit: 1, lease: 1m}\n", srv.URL()))
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	dir := t.TempDir()
	started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "proceed")
	holder := coorddCmd(t, c.dataDir, "sem", "run", "s", "-f", p, "--no-wait", "--",
		"sh", "-c", "touch "+started+"; while [ ! -e "+proceed+" ]; do sleep 0.05; done")
	stderr := &proctest.SyncBuffer{}
	holder.Stderr = stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- holder.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = holder.Process.Kill()
			<-exited
		}
	}()
	proctest.Eventually(t, 20*time.Second, "the command to start", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("sem run exited (%v) before its command started:\n%s", err, stderr)
		default:
		}
		_, err := os.Stat(started)
		return err == nil
	})

	// The command ends while the store is down: the release fails.
	srv.Kill()
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 20*time.Second, "sem run to report a failed release it retries", func() bool {
		return strings.Contains(stderr.String(), "s: releasing the slot failed (retrying")
	})
	srv.Start(t)
	select {
	case err := <-exited:
		exited <- err
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("sem run: exit %d, want the command's 0\n%s", code, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sem run did not exit\n%s", stderr)
	}
	if strings.Contains(stderr.String(), "stays taken") {
		t.Fatalf("sem run gave up the release:\n%s", stderr)
	}
	// Free now, 1 m before the lease would have freed it.
	if code, _, errs := c.run("", false, "sem", "run", "s", "-f", p, "--no-wait", "--", "true"); code != 0 {
		t.Fatalf("the slot is still taken after the retried release: exit %d\n%s\nholder:\n%s", code, errs, stderr)
	}
}
