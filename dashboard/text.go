package dashboard

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coordd/coordd/internal/safetext"
)

// Store values are written by other hosts, and a hostile or broken one can
// put anything there. html/template escapes them for HTML; the
// helpers below also keep them from misleading a reader: a value with a
// control or format character (a bidi override that reorders what is shown,
// a newline that forges a row) is shown quoted and escaped, the rule
// `coordd status` follows (cmd/coordd esc), and long values are cut.

// safe shows a one-line store value: as it is when every character is
// printable (strconv.IsPrint, no backslash or double quote), else quoted
// and escaped as strconv.Quote does, invalid UTF-8 as \x...
func safe(s string) string { return safetext.Line(s) }

// short shows at most n bytes of a one-line value (cut at a character
// boundary, "…" added), made safe.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && cut > n-4 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return safe(s[:cut]) + "…"
	}
	return safe(s)
}

// lines shows at most n bytes of multi-line store text (a job's last error
// with its command's stderr) for a <pre>, as block does.
func lines(s string, n int) string {
	t, cut := block([]byte(s), n, false)
	if cut {
		t += "…"
	}
	return t
}

// block is multi-line store text (a payload, a run's output) as it may be
// shown in a <pre>: newlines and tabs kept, every other non-printable
// character and each invalid byte written as a \u or \x escape. Of a value
// longer than max bytes, the first max (tail: the last max) are kept;
// truncated says so.
func block(b []byte, max int, tail bool) (text string, truncated bool) {
	if len(b) > max {
		truncated = true
		if tail {
			b = b[len(b)-max:]
			for len(b) > 0 && !utf8.RuneStart(b[0]) {
				b = b[1:]
			}
		} else {
			b = b[:max]
		}
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&sb, `\x%02x`, b[0])
		case r == '\n' || r == '\t':
			sb.WriteRune(r)
		case r == '\r':
			sb.WriteString(`\r`)
		case !strconv.IsPrint(r):
			if r < 0x10000 {
				fmt.Fprintf(&sb, `\u%04x`, r)
			} else {
				fmt.Fprintf(&sb, `\U%08x`, r)
			}
		default:
			sb.WriteRune(r)
		}
		b = b[size:]
	}
	return sb.String(), truncated
}

// stamp is a time in UTC, to the second; "-" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// stampIn is a time in the named zone (a task's timezone), with the zone's
// abbreviation; UTC when the zone cannot be loaded.
func stampIn(t time.Time, zone string) string {
	if t.IsZero() {
		return "-"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" {
		loc = time.UTC
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

// span is a duration for a person: rounded to what matters at its size.
func span(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < 24*time.Hour:
		s = d.Round(time.Second).String()
	default:
		days := d / (24 * time.Hour)
		s = fmt.Sprintf("%dd%s", days, (d - days*24*time.Hour).Round(time.Minute))
	}
	if neg {
		return "-" + s
	}
	return s
}

// rel is t relative to now: "in 3m0s", "12s ago"; "-" when t is zero.
func rel(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d >= 0 {
		return "in " + span(d)
	}
	return span(-d) + " ago"
}

// shortHash is a spec hash as operators see it: 12 hex digits. A stored
// hash is written by other hosts, so it is cut at 12 bytes (whole
// characters) and made safe: one that is not hex shows quoted and escaped.
func shortHash(h string) string {
	if len(h) > 12 {
		h = string(wholeRunes([]byte(h[:12]), true))
	}
	return safe(h)
}
