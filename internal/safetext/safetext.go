// Package safetext shows values read from a shared store as one line of
// text. Records in a shared store are written by other hosts, and a
// hostile or broken one can put anything there: a host id, key, error or
// output holding a newline, a tab or a terminal escape would forge lines,
// break columns or move the cursor of whoever reads `coordd status` or the
// dashboard.
package safetext

import (
	"strconv"
	"unicode/utf8"
)

// Line returns s as it is when every character is printable
// (strconv.IsPrint, no backslash or double quote), else quoted and escaped
// as strconv.Quote does (invalid UTF-8 as \x..), so that the quotes show
// that it was escaped.
func Line(s string) string {
	for i, r := range s {
		if r == '\\' || r == '"' || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return strconv.Quote(s)
			}
		}
	}
	return s
}

// Text is Line for free text, such as a line of a command's output, where
// quotes and backslashes are common and harmless: s as it is unless it
// holds a character that is not printable (a control character other than
// tab, a format character such as a bidirectional override) or invalid
// UTF-8; then quoted and escaped as strconv.Quote does. A line of output
// then cannot move the cursor, clear the screen or forge a log line.
func Text(s string) string {
	for i, r := range s {
		if r != '\t' && !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return strconv.Quote(s)
			}
		}
	}
	return s
}
