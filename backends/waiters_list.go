package backends

import "time"

// Waiter is one live record in a semaphore's line of waiters, as an
// operator sees it: who waits and since when, never the owner token (a
// waiter's token is what its releases and grants are checked against).
type Waiter struct {
	// Key is the instance's key, for a waiter of a keyed semaphore.
	Key string `json:"key,omitempty"`
	// Place counts from 1, the head of its line (of its instance's line,
	// for a keyed semaphore): the waiter that the next free slot goes to.
	Place int `json:"place"`
	// Host and PID are those of the process that waits; empty and 0 for a
	// record written by a binary from before the line listed them.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Since is when the waiter entered the line, by the backend's clock
	// (zero for a record written before the line listed them); renewing the record
	// does not move it.
	Since time.Time `json:"since"`
	// ExpiresAt is when the record lapses unless its waiter renews it (a
	// waiter renews it while it waits; a crashed one holds its place until
	// then), by the backend's clock.
	ExpiresAt time.Time `json:"expires_at"`
}
