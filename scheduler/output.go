package scheduler

import (
	"bytes"
	"io"
	"sync"

	"github.com/coordd/coordd/internal/safetext"
)

// maxOutput is the tail of a run's output kept as RunResult.Output.
const maxOutput = 64 << 10

// prefixer writes whole lines to w, each prefixed, under a lock shared by
// every run so that lines of concurrent runs never interleave mid-line.
type prefixer struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix []byte
	own    sync.Mutex
	part   []byte
}

func (p *prefixer) Write(b []byte) (int, error) {
	p.own.Lock()
	defer p.own.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.part = append(p.part, b...)
			if len(p.part) > maxOutput { // a very long line: flush it
				p.flush()
			}
			break
		}
		p.part = append(p.part, b[:i]...)
		b = b[i+1:]
		p.flush()
	}
	return n, nil
}

// flush writes the pending partial line (caller holds own), escaped
// (safetext.Text): a command's output must not drive the terminal or
// forge a line of the daemon's log with a carriage return or an escape
// sequence.
func (p *prefixer) flush() {
	text := safetext.Text(string(p.part))
	line := make([]byte, 0, len(p.prefix)+len(text)+1)
	line = append(append(append(line, p.prefix...), text...), '\n')
	p.part = p.part[:0]
	p.mu.Lock()
	_, _ = p.w.Write(line)
	p.mu.Unlock()
}

// Close flushes a last line without a newline.
func (p *prefixer) Close() {
	p.own.Lock()
	defer p.own.Unlock()
	if len(p.part) > 0 {
		p.flush()
	}
}
