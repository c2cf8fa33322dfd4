package redis_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
)

// deleteSlot removes slot `slot` of semaphore name behind coordd's back
// (drift): its free token, or its holder record when it is held.
func deleteSlot(t *testing.T, b backends.Backend, name string, slot int) {
	t.Helper()
	s, ok := b.(*redis.Store)
	if !ok {
		t.Fatalf("deleteSlot: %T is not a *redis.Store", b)
	}
	if err := redis.DeleteSemSlot(t.Context(), s, name, slot); err != nil {
		t.Fatalf("deleteSlot %s/%d: %v", name, slot, err)
	}
}
