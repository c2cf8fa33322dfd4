package memcached_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/memcached"
	"github.com/coordd/coordd/internal/testenv"
)

// serverTTL asks memcached itself, with the meta protocol, when key
// expires: the server's clock (`stats` time) plus the key's remaining TTL
// (`mg KEY t`), in Unix seconds; ok is false when the key is absent.
func serverTTL(t *testing.T, addr, key string) (expires int64, ok bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "mg %s t\r\nstats\r\n", key); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var ttl, now int64 = -2, -1
	for now < 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading from memcached: %v", err)
		}
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "EN":
			ttl = -1
		case len(f) > 1 && f[0] == "HD":
			for _, flag := range f[1:] {
				if strings.HasPrefix(flag, "t") {
					ttl, _ = strconv.ParseInt(flag[1:], 10, 64)
				}
			}
		case len(f) == 3 && f[0] == "STAT" && f[1] == "time":
			now, _ = strconv.ParseInt(f[2], 10, 64)
		}
	}
	if ttl == -2 {
		t.Fatalf("no answer to mg %s", key)
	}
	if ttl < 0 {
		return 0, false
	}
	return now + ttl, true
}

// TestPromiseLeaseWholeSeconds: spec.md, "On memcached [the lease] is
// rounded up to whole seconds, at least 3 s", and operations.md, "a slot
// key lives 2 s longer than that (a dead holder's slot comes back that
// much later)". The holder record's expiry is that long after its grant,
// after an acquire and after a renewal, and memcached itself drops the
// slot key then.
func TestPromiseLeaseWholeSeconds(t *testing.T) {
	addr, prefix := testenv.MemcachedAddr(t)
	s := openStore(t, addr, prefix, backends.Options{Version: "0.1.0"})
	ctx := t.Context()
	for _, c := range []struct {
		lease time.Duration
		want  int64 // seconds from grant to the key's end
	}{
		{time.Millisecond, 3 + 2},
		{time.Second, 3 + 2},
		{2500 * time.Millisecond, 3 + 2},
		{3 * time.Second, 3 + 2},
		{3001 * time.Millisecond, 4 + 2},
		{7 * time.Second, 7 + 2},
		{90500 * time.Millisecond, 91 + 2},
	} {
		name := fmt.Sprintf("lease-%d", c.lease.Milliseconds())
		if err := s.PutSemaphore(ctx, backends.SemaphoreConfig{Name: name, Limit: 1, Lease: c.lease, MaxWaiting: -1}); err != nil {
			t.Fatal(err)
		}
		owner := "owner-" + name
		g, err := s.TryAcquire(ctx, backends.SemRef{Name: name}, backends.AcquireRequest{Owner: owner, Host: "h", PID: 1, Lease: c.lease})
		if err != nil {
			t.Fatalf("%s: acquire: %v", name, err)
		}
		check := func(what string, expires time.Time) {
			t.Helper()
			m, err := s.ObserveSemaphores(ctx, []string{name})
			if err != nil || m[name] == nil || len(m[name].Holders) != 1 {
				t.Fatalf("%s %s: observe: %v %+v", name, what, err, m[name])
			}
			h := m[name].Holders[0]
			if got := h.ExpiresAt.Unix() - h.AcquiredAt.Unix(); got != c.want || !h.ExpiresAt.Equal(expires) {
				t.Fatalf("%s %s: holder from %v to %v (%d s, returned %v); want %d s for a lease of %v",
					name, what, h.AcquiredAt, h.ExpiresAt, got, expires, c.want, c.lease)
			}
			end, ok := serverTTL(t, addr, memcached.SemSlotKey(s, name, g.Slot))
			// The server's second may tick between its two answers.
			if !ok || end < h.ExpiresAt.Unix() || end > h.ExpiresAt.Unix()+1 {
				t.Fatalf("%s %s: memcached drops the slot key at %d (present: %v), want the holder's expiry %d",
					name, what, end, ok, h.ExpiresAt.Unix())
			}
		}
		check("acquired", g.ExpiresAt)
		exp, err := s.Extend(ctx, backends.SemRef{Name: name}, owner, c.lease)
		if err != nil {
			t.Fatalf("%s: extend: %v", name, err)
		}
		check("renewed", exp)
	}
}
