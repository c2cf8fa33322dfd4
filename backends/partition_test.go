package backends

import "testing"

// TestKeyPartitionIsStable pins the key-to-partition mapping to FNV-1a 32
// (offset basis 2166136261, so the empty key is 261 of 1000) with values
// worked out once: jobs already stored sit in the partition of their key,
// so a change of the function would strand them.
func TestKeyPartitionIsStable(t *testing.T) {
	counts := []int{0, 1, 2, 3, 4, 7, 16, 1000}
	for _, c := range []struct {
		key  string
		want [8]int
	}{
		{"", [...]int{0, 0, 1, 1, 1, 2, 5, 261}},
		{"a", [...]int{0, 0, 0, 1, 0, 5, 12, 220}},
		{"a ", [...]int{0, 0, 0, 0, 0, 1, 4, 92}},
		{"user-42", [...]int{0, 0, 1, 0, 3, 6, 11, 499}},
		{"Straße", [...]int{0, 0, 0, 2, 0, 1, 8, 616}},
		{"\x00\xff", [...]int{0, 0, 0, 1, 0, 4, 0, 248}},
		{"0", [...]int{0, 0, 1, 0, 3, 0, 15, 63}},
		{"63", [...]int{0, 0, 0, 0, 2, 4, 14, 422}},
		{"order:1234567890", [...]int{0, 0, 0, 0, 2, 2, 14, 414}},
		{"k", [...]int{0, 0, 0, 0, 2, 6, 10, 410}},
	} {
		for i, n := range counts {
			if got := KeyPartition(c.key, n); got != c.want[i] {
				t.Errorf("KeyPartition(%q, %d) = %d, want %d", c.key, n, got, c.want[i])
			}
		}
	}
}
