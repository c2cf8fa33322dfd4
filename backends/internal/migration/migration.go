// Package migration loads the numbered SQL migrations that SQL backends
// embed, and compares coordd versions against a schema's min_binary. The
// SQL differs per backend; the file format and the version rule do not.
//
// A migration is migrations/NNNN_name.sql. Its header (the leading comment
// lines) must hold `-- min_binary: X.Y.Z`: the oldest coordd version that may
// use the schema once the migration is applied. Versions run 1, 2, 3...
package migration

import (
	"bufio"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// File is one migration.
type File struct {
	Version   int
	Name      string
	MinBinary string
	SQL       string
}

var (
	fileName      = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)
	minBinaryLine = regexp.MustCompile(`^--\s*min_binary:\s*(\S+)\s*$`)
)

// Load reads every migration in dir of fsys, in version order, and checks
// the names, the headers and that versions run without gaps.
func Load(fsys fs.FS, dir string) ([]File, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []File
	for _, e := range ents {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		f := File{Version: v, Name: m[2], SQL: string(b)}
		sc := bufio.NewScanner(strings.NewReader(f.SQL))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "--") {
				break // the header ends at the first line that is not a comment
			}
			if mm := minBinaryLine.FindStringSubmatch(line); mm != nil {
				f.MinBinary = mm[1]
			}
		}
		if _, ok := ParseVersion(f.MinBinary); !ok {
			return nil, fmt.Errorf("migration %s: header lacks a valid '-- min_binary: X.Y.Z' line", e.Name())
		}
		ms = append(ms, f)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %04d_%s: expected version %d", m.Version, m.Name, i+1)
		}
	}
	return ms, nil
}

// ParseVersion parses "vMAJOR.MINOR.PATCH", ignoring a -pre or +build
// suffix; missing parts count as 0.
func ParseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	if v == "" {
		return out, false
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// VersionLess reports whether a is older than b. An empty or unparsable a
// is a development build and counts as newest; an unparsable b as oldest.
func VersionLess(a, b string) bool {
	va, ok := ParseVersion(a)
	if !ok {
		return false
	}
	vb, ok := ParseVersion(b)
	if !ok {
		return false
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return false
}
