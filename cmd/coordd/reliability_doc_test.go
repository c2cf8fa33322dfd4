package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReliabilityNamesExist: every test docs/reliability.md names as the
// proof of a promise exists. A renamed or deleted test would otherwise
// leave a promise that only looks tested.
func TestReliabilityNamesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "reliability.md"))
	if err != nil {
		t.Fatal(err)
	}
	var src, conformance strings.Builder
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir // .git and the like
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if strings.HasSuffix(p, "_test.go") {
			src.Write(b)
		}
		if filepath.Base(filepath.Dir(p)) == "backendtest" {
			conformance.Write(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A name followed by * is a prefix (TestReadOnly*); GROUP/TEST and
	// mode=... are a placeholder and subtest names built at run time.
	names := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)(\\*?)").FindAllStringSubmatch(string(doc), -1)
	if len(names) < 100 {
		t.Fatalf("found %d test names in reliability.md; the pattern no longer matches the table", len(names))
	}
	for _, m := range names {
		pat := `func ` + regexp.QuoteMeta(m[1]) + `\(`
		if m[2] == "*" {
			pat = `func ` + regexp.QuoteMeta(m[1]) + `[A-Za-z0-9_]*\(`
		}
		if !regexp.MustCompile(pat).MatchString(src.String()) {
			t.Errorf("reliability.md names %s%s, which no test file defines", m[1], m[2])
		}
	}
	for _, m := range regexp.MustCompile("`Conformance/([A-Za-z0-9_/=*]+)").FindAllStringSubmatch(string(doc), -1) {
		parts := strings.Split(m[1], "/")
		for i, part := range parts {
			// mode=session/kill: a semaphore mode and its wake mode.
			wake := i > 0 && strings.HasPrefix(parts[i-1], "mode=") && (part == "kill" || part == "poll")
			if part == "" || part == "GROUP" || part == "TEST" || wake || strings.Contains(part, "=") || strings.HasSuffix(part, "*") {
				continue
			}
			if !strings.Contains(conformance.String(), `"`+part+`"`) {
				t.Errorf("reliability.md names Conformance/%s; backendtest has no subtest %q", m[1], part)
			}
		}
	}
}
