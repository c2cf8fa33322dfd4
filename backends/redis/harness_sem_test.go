package redis_test

import (
	"strings"
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

// instanceRows lists every key of the instances of keyed semaphore name,
// and the index of its instances, read with SCAN behind coordd's back.
// Keys whose TTL passed are not listed (Redis no longer returns them).
func instanceRows(t *testing.T, b backends.Backend, name string) []string {
	t.Helper()
	s := b.(*redis.Store)
	glob := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
	tag := glob.Replace(s.Prefix() + "{sem:" + name + "}:")
	var out []string
	for _, pattern := range []string{tag + "i:*", tag + "inst"} {
		iter := s.Client().Scan(t.Context(), 0, pattern, 1000).Iterator()
		for iter.Next(t.Context()) {
			out = append(out, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
