package scheduler

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// TestOutputLinesEscapedInLog: a command's output reached the daemon's
// log as it was, so a carriage return or an escape sequence could clear
// the operator's terminal or forge a log line. Each line is now escaped
// when it holds such a character; plain lines, quotes and tabs included,
// stay as they are.
func TestOutputLinesEscapedInLog(t *testing.T) {
	var buf bytes.Buffer
	p := &prefixer{mu: &sync.Mutex{}, w: &buf, prefix: []byte("[task r1] ")}
	_, _ = p.Write([]byte("plain \"quoted\" \\ and\ttab\n\x1b[2J2026-01-01T00:00:00Z [INFO]  coordd: forged\r\npartial \x1b]0;title\x07"))
	p.Close()
	want := "[task r1] plain \"quoted\" \\ and\ttab\n" +
		"[task r1] \"\\x1b[2J2026-01-01T00:00:00Z [INFO]  coordd: forged\\r\"\n" +
		"[task r1] \"partial \\x1b]0;title\\a\"\n"
	if got := buf.String(); got != want {
		t.Errorf("log:\n%q\nwant:\n%q", got, want)
	}
	if strings.ContainsAny(buf.String(), "\x1b\r\x07") {
		t.Errorf("raw control characters reached the log: %q", buf.String())
	}
}
