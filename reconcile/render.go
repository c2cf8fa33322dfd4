package reconcile

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// SummaryLine is Terraform's closing line: "Plan: 1 to add, 0 to change,
// 0 to destroy." or "No changes.".
func (p *Plan) SummaryLine() string {
	if !p.HasChanges() {
		return "No changes."
	}
	return fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", p.Summary.Add, p.Summary.Change, p.Summary.Destroy)
}

func (c *Change) headline() string {
	switch c.Action {
	case Create:
		return "will be created"
	case Update:
		return "will be updated in place"
	case Replace:
		return fmt.Sprintf("must be replaced (moves from %s)", c.PrevBackend)
	case Delete:
		return "will be destroyed"
	case Repair:
		return "drifted and will be repaired"
	case Finish:
		if c.desired == nil {
			return "finishes its pending delete"
		}
		return "finishes its replacement"
	case Wait:
		return "is waiting"
	}
	return string(c.Action)
}

// forcesReplacement names the attributes whose change forces a replace.
func forcesReplacement(c *Change, name string) bool {
	return c.Action == Replace && (name == "backend" || (c.Address.Kind == "semaphore" && (name == "mode" || name == "keyed")))
}

func writeChange(w io.Writer, c *Change) {
	fmt.Fprintf(w, "  # %s %s\n", c.Address, c.headline())
	fmt.Fprintf(w, "  %s %s (backend %s)\n", c.Action.Symbol(), c.Address, c.Backend)
	for _, a := range c.Attrs {
		switch {
		case a.Old == "" && c.Action != Update && c.Action != Replace:
			fmt.Fprintf(w, "      + %s: %s\n", a.Name, a.New)
		case a.New == "" && c.Action == Delete:
			fmt.Fprintf(w, "      - %s: %s\n", a.Name, a.Old)
		default:
			suffix := ""
			if forcesReplacement(c, a.Name) {
				suffix = "   # forces replacement"
			}
			fmt.Fprintf(w, "      ~ %s: %s -> %s%s\n", a.Name, orNone(a.Old), orNone(a.New), suffix)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "      note: %s\n", n)
	}
	if c.Blocked != "" {
		fmt.Fprintf(w, "      BLOCKED: %s\n", c.Blocked)
	}
	fmt.Fprintln(w)
}

// text describes an override in one line. The reason and the host come
// from the store, written by another host: they are quoted.
func (o Override) text() string {
	if o.Paused == nil {
		return "overridden"
	}
	p := o.Paused
	s := fmt.Sprintf("paused by %s at %s: %s (coordd cron resume %s)", strconv.Quote(p.Host),
		p.At.UTC().Format(time.RFC3339), strconv.Quote(p.Reason), o.Address.Name)
	if o.Moves {
		s += "; apply pauses it again on its new backend"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// WriteText prints the plan the way an operator reads it in a pull request.
func (p *Plan) WriteText(w io.Writer) {
	if len(p.Changes) > 0 {
		fmt.Fprintln(w, "coordd will perform the following actions:")
		fmt.Fprintln(w)
		for _, c := range p.Changes {
			writeChange(w, c)
		}
	}
	if len(p.Drift) > 0 {
		fmt.Fprintln(w, "Drift: state changed outside coordd since the last apply; apply repairs it:")
		fmt.Fprintln(w)
		for _, c := range p.Drift {
			writeChange(w, c)
		}
	}
	if len(p.Overrides) > 0 {
		fmt.Fprintln(w, "Operator overrides (not drift; apply keeps them):")
		for _, o := range p.Overrides {
			fmt.Fprintf(w, "  %s: %s\n", o.Address, o.text())
		}
		fmt.Fprintln(w)
	}
	if len(p.Waiting) > 0 {
		fmt.Fprintln(w, "Waiting (nothing to do yet):")
		for _, c := range p.Waiting {
			fmt.Fprintf(w, "  %s: %s\n", c.Address, strings.Join(c.Notes, "; "))
		}
		fmt.Fprintln(w)
	}
	for _, b := range p.Blocked {
		fmt.Fprintf(w, "Error: %s\n", b)
	}
	if len(p.Blocked) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, p.SummaryLine())
}

// planJSON is the --json form: the same plan, with the summary line and the
// fingerprint that apply checks.
type planJSON struct {
	*Plan
	Fingerprint string `json:"fingerprint"`
	SummaryText string `json:"summary_text"`
	HasChanges  bool   `json:"has_changes"`
}

// WriteJSON prints the plan as one JSON document.
func (p *Plan) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(planJSON{Plan: p, Fingerprint: p.Fingerprint(), SummaryText: p.SummaryLine(), HasChanges: p.HasChanges()})
}
