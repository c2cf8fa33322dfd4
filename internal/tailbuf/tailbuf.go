// Package tailbuf keeps the end of what a command writes: a cron run's
// output for its history, a failed job's stderr for its last error. What
// a person needs to see of a failure is mostly its last lines.
package tailbuf

import (
	"bytes"
	"sync"
)

// Buffer keeps the last Max bytes written to it. Safe for concurrent use.
type Buffer struct {
	max int

	mu  sync.Mutex
	buf []byte
	cut bool // bytes were dropped from the front
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.cut = t.cut || len(p) > t.max || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// Bytes returns a copy of what is kept.
func (t *Buffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// Cut reports whether bytes were dropped from the front.
func (t *Buffer) Cut() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut
}
