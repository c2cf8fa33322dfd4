package dashboard

import (
	"fmt"
	"testing"
	"time"
)

// TestLoginFailuresPerClient: failed logins are counted per client
// address (an IPv6 one by its /64), a minute at a time, and the addresses
// counted stay at most maxTracked whatever the number of clients.
func TestLoginFailuresPerClient(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"192.0.2.1:4000", "192.0.2.1:4001"},
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff::9]:5000"},
		{"[::ffff:192.0.2.1]:4000", "192.0.2.1:80"},
	} {
		if clientOf(tc.a) != clientOf(tc.b) {
			t.Errorf("%s and %s count apart: %s, %s", tc.a, tc.b, clientOf(tc.a), clientOf(tc.b))
		}
	}
	if clientOf("[2001:db8:1:2::1]:1") == clientOf("[2001:db8:1:3::1]:1") {
		t.Errorf("two /64s count together")
	}

	var s sessions
	now := time.Unix(1_800_000_000, 0)
	a, b := clientOf("192.0.2.1:1"), clientOf("192.0.2.2:1")
	for range maxFailures {
		if s.throttled(a, now) {
			t.Fatal("throttled before maxFailures")
		}
		s.failed(a, now)
	}
	if !s.throttled(a, now) || s.throttled(b, now) {
		t.Errorf("after %d failures from %s: throttled %v, %s throttled %v", maxFailures, a, s.throttled(a, now), b, s.throttled(b, now))
	}
	if s.throttled(a, now.Add(time.Minute+time.Second)) {
		t.Errorf("%s still throttled a minute later", a)
	}
	for i := range maxTracked + 50 {
		s.failed(fmt.Sprintf("198.51.%d.%d", i/256, i%256), now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(s.failures); n > maxTracked {
		t.Errorf("%d client addresses counted, want at most %d", n, maxTracked)
	}
}
