package main

import (
	"net"
	"strings"
	"testing"
)

// TestRunListenBusyPort: a --listen address that cannot be bound stops
// `coordd run` at start with the reason, before it joins the cluster.
func TestRunListenBusyPort(t *testing.T) {
	c := newCLI(t)
	p := writeSpec(t, good)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, addr := range []string{ln.Addr().String(), "127.0.0.1:notaport"} {
		code, _, errs := c.run("", false, "run", "-f", p, "--host-id", "h", "--listen", addr)
		if code != 1 || !strings.Contains(errs, "--listen") {
			t.Errorf("run --listen %s: %d %q", addr, code, errs)
		}
	}
}
