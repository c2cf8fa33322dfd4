// Package slots holds the slot arithmetic every semaphore backend shares:
// a consistent semaphore has max(limit, live holders) slots. Lowering the
// limit drops free slots at once (highest numbers first) and leaves held
// ones to retire on release; raising it adds the lowest unused numbers.
package slots

import "database/sql"

// Slot is one slot row as a backend read it.
type Slot struct {
	N    int
	Live bool // held by an unexpired lease
}

// Repair returns the free slots to drop, or the numbers to add, to bring
// slots (sorted by N) to max(limit, live holders). With grow false it only
// drops: a release retires slots, it never adds any, so drift stays visible.
func Repair(slots []Slot, limit int, grow bool) (drop, add []int) {
	used := make(map[int]bool, len(slots))
	var free []int
	live := 0
	for _, s := range slots {
		used[s.N] = true
		if s.Live {
			live++
		} else {
			free = append(free, s.N)
		}
	}
	want := max(limit, live)
	switch n := len(slots); {
	case n > want:
		drop = free[len(free)-min(n-want, len(free)):]
	case n < want && grow:
		for i := 0; len(add) < want-n; i++ {
			if !used[i] {
				add = append(add, i)
			}
		}
	}
	return drop, add
}

// Numbers reads a column of slot numbers (a keyed instance's holders), in
// the rows' order, and closes rows.
func Numbers(rows *sql.Rows) ([]int, error) {
	defer rows.Close()
	var used []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		used = append(used, n)
	}
	return used, rows.Err()
}

// LowestUnused is the lowest number missing from sorted, distinct,
// non-negative used: the slot a keyed instance's next holder takes.
func LowestUnused(used []int) int {
	n := 0
	for _, u := range used {
		if u != n {
			break
		}
		n++
	}
	return n
}
