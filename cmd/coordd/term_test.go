package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"web1":                 "web1",
		"exit 1 (failed), é 😀": "exit 1 (failed), é 😀",
		"":                     "",
		"a\nb":                 `"a\nb"`,
		"\x1b[2J":              `"\x1b[2J"`,
		"tab\there":            `"tab\there"`,
		"\u009b":               `"\u009b"`,
		"\x7f":                 `"\x7f"`,
		"\xff":                 `"\xff"`,
		"\u202eevil":           `"\u202eevil"`,
		`a\nb`:                 `"a\\nb"`, // a literal backslash cannot pass for an escape
		`say "hi"`:             `"say \"hi\""`,
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestWriteJSONEscapesC1AndDEL(t *testing.T) {
	v := map[string]string{"k": "a\x1b\u009b\x7f\u0080é\xff"}
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.Bytes()
	for _, bad := range []string{"\x1b", "\u009b", "\x7f", "\u0080", "\xff"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("writeJSON output holds a raw %q: %q", bad, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["k"] != "a\x1b\u009b\x7f\u0080é\ufffd" {
		t.Fatalf("writeJSON output %q reads back as %q, %v", out, back["k"], err)
	}
}
