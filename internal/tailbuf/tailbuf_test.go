package tailbuf_test

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/tailbuf"
)

// TestKeepsTheEnd: small writes, one write larger than the buffer, and a
// write that fits after others: the last bytes are kept, and Cut says
// whether any were dropped.
func TestKeepsTheEnd(t *testing.T) {
	b := tailbuf.New(8)
	_, _ = b.Write([]byte("abc"))
	_, _ = b.Write([]byte("def"))
	if got := string(b.Bytes()); got != "abcdef" || b.Cut() {
		t.Fatalf("after 6 bytes: %q cut=%v", got, b.Cut())
	}
	_, _ = b.Write([]byte("ghij"))
	if got := string(b.Bytes()); got != "cdefghij" || !b.Cut() {
		t.Fatalf("after 10 bytes: %q cut=%v", got, b.Cut())
	}
	_, _ = b.Write([]byte(strings.Repeat("x", 20) + "12345678"))
	if got := string(b.Bytes()); got != "12345678" {
		t.Fatalf("after a long write: %q", got)
	}
	exact := tailbuf.New(4)
	_, _ = exact.Write([]byte("wxyz"))
	if got := string(exact.Bytes()); got != "wxyz" || exact.Cut() {
		t.Fatalf("a write of exactly the size: %q cut=%v", got, exact.Cut())
	}
}
