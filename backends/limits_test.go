package backends_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

func TestCheckPayload(t *testing.T) {
	for _, c := range []struct {
		n   int
		max int64
		ok  bool
	}{
		{64, 64, true}, {65, 64, false}, {0, 64, true},
		{spec.MaxPayloadCap, 0, true}, {spec.MaxPayloadCap + 1, 0, false},
		{spec.MaxPayloadCap + 1, 1 << 40, false}, // a stored config above the cap does not lift it
	} {
		err := backends.CheckPayload(c.n, c.max)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, backends.ErrPayloadTooLarge)) {
			t.Errorf("CheckPayload(%d, %d) = %v, want ok %v", c.n, c.max, err, c.ok)
		}
	}
}

func TestCheckRequests(t *testing.T) {
	if err := backends.CheckPush(backends.PushRequest{Key: strings.Repeat("k", 256)}); !errors.Is(err, spec.ErrInvalidKey) {
		t.Errorf("CheckPush of a 256-byte key: %v", err)
	}
	if err := backends.CheckAcquire(backends.AcquireRequest{}); err != nil {
		t.Errorf("CheckAcquire without a host: %v (no host recorded is allowed)", err)
	}
	if err := backends.CheckAcquire(backends.AcquireRequest{Host: "a\n"}); !errors.Is(err, spec.ErrInvalidHostID) {
		t.Errorf("CheckAcquire of host \"a\\n\": %v", err)
	}
	if err := backends.CheckHeartbeat(backends.HostRecord{}); !errors.Is(err, spec.ErrInvalidHostID) {
		t.Errorf("CheckHeartbeat without a host: %v", err)
	}
}
