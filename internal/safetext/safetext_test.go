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

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"web-1":              "web-1",
		"日本":                 "日本",
		"tab\there":          "tab\there",
		`say "hi" \n`:        `say "hi" \n`,
		"a\nb":               `"a\nb"`,
		"progress 50%\r":     `"progress 50%\r"`,
		"\x1b[2Jclear":       `"\x1b[2Jclear"`,
		"right\u202eto left": `"right\u202eto left"`,
		"bad \xff utf8":      `"bad \xff utf8"`,
		"":                   "",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %s, want %s", in, got, want)
		}
	}
}
