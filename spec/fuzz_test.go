package spec

import (
	"errors"
	"testing"
)

// FuzzLoad checks that no input makes the loader panic, and that every
// error it returns carries a position.
func FuzzLoad(f *testing.F) {
	for _, s := range goodSpecs {
		f.Add(s, "")
	}
	for _, c := range badCases {
		f.Add(c.files["a.yaml"], c.files["b.yaml"])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		getenv := func(k string) (string, bool) { return "v", k == "SET" }
		for _, skip := range []bool{false, true} {
			s, err := LoadFiles(map[string][]byte{"a.yaml": []byte(a), "b.yaml": []byte(b)},
				LoadOptions{Getenv: getenv, SkipEnv: skip, DataDir: "/data"})
			if err == nil {
				checkInvariants(t, s)
				continue
			}
			if s != nil {
				t.Fatalf("spec returned with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			if len(errs) == 0 {
				t.Fatalf("empty Errors")
			}
			for _, e := range errs {
				if e.Pos.File == "" || e.Pos.Line < 1 || e.Pos.Col < 1 {
					t.Fatalf("error without a position: %#v", e)
				}
			}
		}
	})
}
