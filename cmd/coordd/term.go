package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strconv"

	"github.com/mattn/go-isatty"

	"github.com/coordd/coordd/internal/safetext"
)

// stdinIsTerminal reports whether a person can answer a prompt. /dev/null
// is a character device too, so this asks the terminal driver, not Stat.
func stdinIsTerminal() bool {
	return isatty.IsTerminal(os.Stdin.Fd())
}

// wantColour decides whether stdout gets colours: never with NO_COLOR set
// (no-color.org) or TERM=dumb; always with CLICOLOR_FORCE set to anything
// but 0 (for a pager that shows them, and for tests); else only when stdout
// is a terminal, so that a pipe, a file or CI log gets plain text.
func wantColour(getenv func(string) string, stdoutTerminal bool) bool {
	switch {
	case getenv("NO_COLOR") != "", getenv("TERM") == "dumb":
		return false
	case getenv("CLICOLOR_FORCE") != "" && getenv("CLICOLOR_FORCE") != "0":
		return true
	}
	return stdoutTerminal
}

// ANSI colours. Each code is 5 bytes, so that a column of a tabwriter
// table whose every cell is painted stays aligned (tabwriter counts bytes).
const (
	colourGreen  = "\x1b[32m"
	colourYellow = "\x1b[33m"
	colourRed    = "\x1b[31m"
	colourGrey   = "\x1b[90m"
	colourPlain  = "\x1b[39m" // the default colour: pads a cell to its column
	colourReset  = "\x1b[0m"
)

// paint wraps s in colour when env shows colours.
func (env *cliEnv) paint(colour, s string) string {
	if !env.colour {
		return s
	}
	return colour + s + colourReset
}

// stateColour is the colour of a state word that status, sem status and
// cron list print: green for what is well, yellow for what needs a look,
// red for a failure, grey for what is over.
func stateColour(state string) string {
	switch state {
	case "live", "succeeded", "applied":
		return colourGreen
	case "stale", "running", "skipped", "replaced", "not applied", "paused":
		return colourYellow
	case "failed", "lost", "timed_out", "timeout", "killed":
		return colourRed
	case "stopped":
		return colourGrey
	}
	return colourPlain
}

// esc makes a value read from a store safe to print as text. Records in a
// shared store are written by other hosts, and a hostile or broken one can
// put anything there: a host id, key, error or output holding a
// newline, a tab or a terminal escape would forge lines, break the columns
// or move the cursor. A value of printable characters only (strconv.IsPrint,
// no backslash or double quote) prints as it is; any other is printed
// quoted and escaped as strconv.Quote does (invalid UTF-8 as \x..), so that
// the quotes show that it was escaped. Every text output of status, sem
// status, cron list/history and queue dead passes store values through it.
func esc(s string) string { return safetext.Line(s) }

// writeJSON writes v as indented JSON. encoding/json escapes C0 controls
// and replaces invalid UTF-8, but writes DEL and the C1 controls
// (U+0080-U+009F, which some terminals obey as escapes) as they are; they
// are escaped here too, so that `--json` on a terminal is as safe as text.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(escapeJSONControls(b), '\n'))
	return err
}

// escapeJSONControls rewrites DEL and C1 characters in JSON text as \u
// escapes. Outside strings JSON holds only ASCII without them, so every
// match is inside a string, where the escape means the same character.
func escapeJSONControls(b []byte) []byte {
	if bytes.IndexByte(b, 0x7f) < 0 && bytes.IndexByte(b, 0xc2) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == 0x7f:
			out = append(out, `\u007f`...)
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = append(out, `\u00`...)
			out = strconv.AppendUint(out, uint64(b[i+1]), 16)
			i++
		default:
			out = append(out, b[i])
		}
	}
	return out
}
