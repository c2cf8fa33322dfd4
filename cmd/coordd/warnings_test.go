package main

// A semaphore without max_hold lets a hung holder renew forever; validate
// and plan warn about it, naming file:line, without changing their exit
// status.

import (
	"encoding/json"
	"strings"
	"testing"
)

const warnSpec = `semaphores:
  bounded: {limit: 1, max_hold: 1h}
  open:
    limit: 2
`

func TestMaxHoldWarning(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, warnSpec)
	want := "Warning: " + p + ":3:3: semaphore.open: no max_hold"

	code, out, errs := c.run("", false, "validate", "-f", p)
	if code != 0 || !strings.Contains(out, "The spec is valid") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, want) || strings.Count(errs, "Warning:") != 1 {
		t.Errorf("validate stderr lacks exactly one %q:\n%s", want, errs)
	}

	code, out, errs = c.run("", false, "plan", "-f", p, "--detailed-exitcode")
	if code != 2 || !strings.Contains(out, "semaphore.open") {
		t.Fatalf("plan: exit %d (want 2: changes)\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, want) || strings.Count(errs, "Warning:") != 1 {
		t.Errorf("plan stderr lacks exactly one %q:\n%s", want, errs)
	}

	code, out, errs = c.run("", false, "plan", "-f", p, "--json")
	if code != 0 {
		t.Fatalf("plan --json: exit %d\n%s", code, errs)
	}
	var pj struct {
		Warnings []struct {
			File    string `json:"file"`
			Line    int    `json:"line"`
			Address string `json:"address"`
			Message string `json:"message"`
		} `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(out), &pj); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	if len(pj.Warnings) != 1 || pj.Warnings[0].File != p || pj.Warnings[0].Line != 3 ||
		pj.Warnings[0].Address != "semaphore.open" || !strings.Contains(pj.Warnings[0].Message, "max_hold") {
		t.Errorf("plan --json warnings %+v, want semaphore.open at %s:3", pj.Warnings, p)
	}

	// Once applied, plan still warns (the advice is about the spec, not
	// the change), and every semaphore with max_hold is quiet.
	if code, _, errs := c.run("", false, "apply", "-f", p, "--auto-approve"); code != 0 {
		t.Fatalf("apply: %s", errs)
	}
	if code, _, errs := c.run("", false, "plan", "-f", p, "--detailed-exitcode"); code != 0 || !strings.Contains(errs, want) {
		t.Errorf("plan after apply: exit %d (want 0), stderr:\n%s", code, errs)
	}
	quiet := writeSpec(t, "semaphores:\n  bounded: {limit: 1, max_hold: 1h}\n")
	if code, _, errs := c.run("", false, "validate", "-f", quiet); code != 0 || strings.Contains(errs, "Warning") {
		t.Errorf("validate of a spec without warnings: exit %d, stderr:\n%s", code, errs)
	}
}
