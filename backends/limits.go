package backends

import (
	"fmt"

	"github.com/coordd/coordd/spec"
)

// The checks below are the first statement of every backend's Push,
// TryAcquire and Heartbeat, and the queue, semaphore and leadership APIs run
// the same ones before they call a backend: the limits of package spec
// (spec/limits.go) are then one set, and no backend can drift from them.
// A refused value has touched nothing.

// CheckPush checks a push request: its key (spec.ErrInvalidKey) and its
// payload against spec.MaxPayloadCap (ErrPayloadTooLarge). The queue's own
// max_payload is checked by CheckPayload once the backend has read it.
func CheckPush(req PushRequest) error {
	if err := spec.CheckKey(req.Key); err != nil {
		return err
	}
	if err := spec.CheckPriority(req.Priority); err != nil {
		return err
	}
	return CheckPayload(len(req.Payload), spec.MaxPayloadCap)
}

// CheckPayload returns ErrPayloadTooLarge when a payload of n bytes
// exceeds max (max <= 0: only spec.MaxPayloadCap applies).
func CheckPayload(n int, max int64) error {
	if max <= 0 || max > spec.MaxPayloadCap {
		max = spec.MaxPayloadCap
	}
	if int64(n) > max {
		return fmt.Errorf("payload of %d bytes exceeds max_payload %d: %w", n, max, ErrPayloadTooLarge)
	}
	return nil
}

// CheckAcquire checks the host of an acquire request: empty (no host
// recorded) or a valid host id (spec.ErrInvalidHostID).
func CheckAcquire(req AcquireRequest) error {
	if req.Host == "" {
		return nil
	}
	return spec.CheckHostID(req.Host)
}

// CheckHeartbeat checks a host record's host id (spec.ErrInvalidHostID):
// the record is stored under it.
func CheckHeartbeat(rec HostRecord) error {
	return spec.CheckHostID(rec.Host)
}
