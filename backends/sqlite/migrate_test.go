package sqlite

import "testing"

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"0.1.0", "0.2.0", true},
		{"0.2.0", "0.1.0", false},
		{"0.1.0", "0.1.0", false},
		{"v0.1.9", "0.1.10", true},
		{"0.1.0-dev", "0.1.0", false}, // the suffix is ignored
		{"1", "0.9.9", false},
		{"0.9", "0.9.1", true},
		{"", "9.9.9", false},    // empty: newest
		{"dev", "9.9.9", false}, // unparsable: newest
		{"0.1.0", "junk", false},
		{"1.2.3.4", "2.0.0", false},
	} {
		if got := versionLess(c.a, c.b); got != c.less {
			t.Errorf("versionLess(%q, %q) = %v, want %v", c.a, c.b, got, c.less)
		}
	}
}

func TestEmbeddedMigrations(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].version != 1 || ms[0].name != "init" || ms[0].minBinary != "0.1.0" {
		t.Fatalf("migrations = %+v", ms)
	}
}
