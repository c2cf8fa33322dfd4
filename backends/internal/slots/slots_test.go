package slots

import (
	"reflect"
	"testing"
)

func TestRepair(t *testing.T) {
	l, f := true, false
	mk := func(live ...bool) []Slot {
		out := make([]Slot, len(live))
		for i, v := range live {
			out[i] = Slot{N: i, Live: v}
		}
		return out
	}
	for _, c := range []struct {
		name      string
		slots     []Slot
		limit     int
		grow      bool
		drop, add []int
	}{
		{"consistent", mk(l, f, f), 3, true, nil, nil},
		{"grow", mk(l, f), 4, true, nil, []int{2, 3}},
		{"no grow on release", mk(l, f), 4, false, nil, nil},
		{"fill a hole", []Slot{{0, l}, {2, f}}, 3, true, nil, []int{1}},
		{"shrink drops highest free", mk(f, l, f, f), 2, true, []int{2, 3}, nil},
		{"held slots stay above the limit", mk(l, l, l, f), 2, true, []int{3}, nil},
		{"all held, nothing to drop", mk(l, l, l), 1, true, []int{}, nil},
		{"drain to zero", mk(f, f), 0, true, []int{0, 1}, nil},
	} {
		drop, add := Repair(c.slots, c.limit, c.grow)
		if len(drop) == 0 && len(c.drop) == 0 {
			drop, c.drop = nil, nil
		}
		if !reflect.DeepEqual(drop, c.drop) || !reflect.DeepEqual(add, c.add) {
			t.Errorf("%s: drop %v add %v, want %v %v", c.name, drop, add, c.drop, c.add)
		}
	}
}

func TestLowestUnused(t *testing.T) {
	for _, c := range []struct {
		used []int
		want int
	}{{nil, 0}, {[]int{0}, 1}, {[]int{1, 2}, 0}, {[]int{0, 1, 3}, 2}, {[]int{0, 1, 2}, 3}} {
		if got := LowestUnused(c.used); got != c.want {
			t.Errorf("LowestUnused(%v) = %d, want %d", c.used, got, c.want)
		}
	}
}
