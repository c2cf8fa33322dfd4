package spec

import (
	"fmt"
	"sort"
)

// Warning is something a valid spec allows but coordd advises against. It
// is located like an Error; validate and plan print warnings without
// failing.
type Warning struct {
	Pos
	// Address names the object, e.g. "semaphore.reindex".
	Address string `json:"address"`
	Msg     string `json:"message"`
}

// String formats the warning as "FILE:LINE:COL: ADDRESS: MSG".
func (w Warning) String() string {
	return fmt.Sprintf("%s: %s: %s", w.Pos, w.Address, w.Msg)
}

// noMaxHold is the warning for a semaphore without max_hold: a holder
// renews its lease for as long as its command lives, so a hung command
// holds the slot forever and everyone else waits.
const noMaxHold = "no max_hold: a holder whose command hangs renews its lease and keeps the slot forever; " +
	"set max_hold to a few times the longest hold you expect (e.g. 1h for a job that takes 10m)"

// Warnings lists the spec's warnings, sorted by file, line and column. Not
// empty does not make the spec invalid.
func (s *Spec) Warnings() []Warning {
	var out []Warning
	for name, o := range s.Semaphores {
		if o.MaxHold == 0 {
			out = append(out, Warning{Pos: o.Pos, Address: Address{KindSemaphore, name}.String(), Msg: noMaxHold})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return out
}
