package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cronFixture applies a spec with one task and returns its path.
func cronFixture(t *testing.T, command string) (specPath, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	specPath = writeSpec(t, fmt.Sprintf("cron:\n  job:\n    schedule: \"0 4 * * *\"\n    command: %q\n", command))
	out, err := coorddCmd(t, dataDir, "apply", "-f", specPath, "--auto-approve").CombinedOutput()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	return specPath, dataDir
}

func TestCronRunHistoryList(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "env")
	specPath, dataDir := cronFixture(t, `echo "$COORDD_TASK $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_RUN_ID $COORDD_FENCING_TOKEN" > `+envFile+`; echo hello; exit 7`)
	out, err := coorddCmd(t, dataDir, "cron", "run", "job", "-f", specPath).Output()
	if code := exitCode(t, err); code != 7 {
		t.Fatalf("cron run: exit %d, want the child's 7", code)
	}
	if strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("stdout %q", out)
	}
	f := strings.Fields(waitFile(t, envFile, time.Second))
	if len(f) != 5 || f[0] != "job" || !strings.HasSuffix(f[1], "Z") || f[2] != "1" || len(f[3]) != 32 || f[4] == "" {
		t.Fatalf("child env %q", f)
	}
	if _, err := time.Parse(time.RFC3339, f[1]); err != nil {
		t.Fatalf("COORDD_SCHEDULED_AT %q: %v", f[1], err)
	}

	out, err = coorddCmd(t, dataDir, "cron", "history", "job", "-f", specPath, "--json").Output()
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var runs []struct {
		RunID    string `json:"run_id"`
		Manual   bool   `json:"manual"`
		Status   string `json:"status"`
		ExitCode int    `json:"exit_code"`
		Attempt  int    `json:"attempt"`
	}
	if err := json.Unmarshal(out, &runs); err != nil {
		t.Fatalf("history json: %v\n%s", err, out)
	}
	if len(runs) != 1 || !runs[0].Manual || runs[0].Status != "failed" || runs[0].ExitCode != 7 || runs[0].RunID != f[3] || runs[0].Attempt != 1 {
		t.Fatalf("history %+v", runs)
	}
	out, err = coorddCmd(t, dataDir, "cron", "history", "job", "-f", specPath).Output()
	if err != nil || !strings.Contains(string(out), "manual") || !strings.Contains(string(out), "failed") {
		t.Fatalf("history table (%v):\n%s", err, out)
	}

	out, err = coorddCmd(t, dataDir, "cron", "list", "-f", specPath).Output()
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !strings.Contains(string(out), "cron.job") || !strings.Contains(string(out), " 04:00:00 UTC") || !strings.Contains(string(out), "failed (exit 7)") {
		t.Fatalf("list:\n%s", out)
	}
	out, err = coorddCmd(t, dataDir, "cron", "list", "-f", specPath, "--json").Output()
	var list []struct {
		Name    string     `json:"name"`
		NextRun *time.Time `json:"next_run"`
	}
	if err != nil || json.Unmarshal(out, &list) != nil || len(list) != 1 || list[0].NextRun == nil || list[0].NextRun.Hour() != 4 {
		t.Fatalf("list json (%v):\n%s", err, out)
	}
}

func TestCronRunExitCodes(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	specPath, dataDir := cronFixture(t, "echo $$ > "+pidFile+"; exec sleep 30")
	first := coorddCmd(t, dataDir, "cron", "run", "job", "-f", specPath)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
	waitFile(t, pidFile, 10*time.Second)
	// overlap forbid while the first runs: 75, recorded as skipped.
	if code := exitCode(t, coorddCmd(t, dataDir, "cron", "run", "job", "-f", specPath).Run()); code != 75 {
		t.Fatalf("second run while the first runs: exit %d, want 75", code)
	}
	out, _ := coorddCmd(t, dataDir, "cron", "history", "job", "-f", specPath).Output()
	if !strings.Contains(string(out), "skipped") {
		t.Fatalf("history:\n%s", out)
	}
	if code := exitCode(t, coorddCmd(t, dataDir, "cron", "run", "nope", "-f", specPath).Run()); code != 125 {
		t.Fatalf("unknown task: exit %d, want 125", code)
	}
	// Command not found: 127.
	specPath2, dataDir2 := cronFixture(t, "x")
	_ = os.WriteFile(specPath2, []byte("cron:\n  job:\n    schedule: \"0 4 * * *\"\n    command: [/nonexistent/cmd]\n"), 0o644)
	if out, err := coorddCmd(t, dataDir2, "apply", "-f", specPath2, "--auto-approve").CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if code := exitCode(t, coorddCmd(t, dataDir2, "cron", "run", "job", "-f", specPath2).Run()); code != 127 {
		t.Fatalf("missing command: exit %d, want 127", code)
	}
}
