package sqlstore

import (
	"errors"
	"sync/atomic"
)

// ErrRetry asks DB.Write to run a transaction again: it lost a race that
// running it again cures (a racing transaction inserted the row this one
// found absent).
var ErrRetry = errors.New("lost a race, retry")

// Core is the part of a SQL store that every dialect shares: the
// cluster's applied state, the host registry, the leader lease, cron
// pauses, waiter lines and the migration loop. A SQL store embeds it and
// adds what is its own.
type Core struct {
	DB DB

	// jobSeq spreads keyless jobs over a queue's partitions, round robin
	// (JobPartition).
	jobSeq atomic.Uint64
}
