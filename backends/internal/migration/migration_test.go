package migration

import (
	"testing"
	"testing/fstest"
)

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
		if got := VersionLess(c.a, c.b); got != c.less {
			t.Errorf("VersionLess(%q, %q) = %v, want %v", c.a, c.b, got, c.less)
		}
	}
}

func TestLoad(t *testing.T) {
	ok := fstest.MapFS{
		"m/0001_init.sql": {Data: []byte("-- creates things\n-- min_binary: 0.1.0\nCREATE TABLE a (x INT);\n")},
		"m/0002_more.sql": {Data: []byte("-- min_binary: 0.2.0\nCREATE TABLE b (x INT);\n")},
	}
	ms, err := Load(ok, "m")
	if err != nil || len(ms) != 2 || ms[1].Version != 2 || ms[1].Name != "more" || ms[1].MinBinary != "0.2.0" {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/0001_a.sql": {Data: []byte("-- min_binary: 0.1.0\n")}, "m/0003_c.sql": {Data: []byte("-- min_binary: 0.1.0\n")}},
		"no header": {"m/0001_a.sql": {Data: []byte("CREATE TABLE a (x INT);\n-- min_binary: 0.1.0\n")}},
		"bad name":  {"m/1_a.sql": {Data: []byte("-- min_binary: 0.1.0\n")}},
	} {
		if _, err := Load(fsys, "m"); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
}
