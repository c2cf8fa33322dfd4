package proctest

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestWitnessCountsATermStoppedCommandOut: a command stopped with SIGTERM
// in the middle of its body (as coordd stops one whose lease is lost)
// leaves the witness, so a later holder is not counted beside it; the
// peak stays 1 across the two runs.
func TestWitnessCountsATermStoppedCommandOut(t *testing.T) {
	w := NewWitness(t)
	cmd := exec.Command("sh", "-c", w.Script("sleep 30"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runs, _ := w.Peak(t); runs == 0 && time.Now().Before(deadline); runs, _ = w.Peak(t) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // past the line that sets the trap
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Wait()
	if out, err := exec.Command("sh", "-c", w.Script("true")).CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if runs, peak := w.Peak(t); runs != 2 || peak != 1 {
		t.Fatalf("runs %d, peak %d; want 2 runs, never two inside at once", runs, peak)
	}
}
