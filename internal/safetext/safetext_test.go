package safetext

import "testing"

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"web-1":         "web-1",
		"日本":            "日本",
		"a\nb":          `"a\nb"`,
		"tab\there":     `"tab\there"`,
		"\x1b[2J":       `"\x1b[2J"`,
		`back\slash`:    `"back\\slash"`,
		`say "hi"`:      `"say \"hi\""`,
		"bad \xff utf8": `"bad \xff utf8"`,
		"":              "",
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %s, want %s", in, got, want)
		}
	}
}
