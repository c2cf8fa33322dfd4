package redis_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/redis"
)

// insertJobs adds n ready jobs to partition p of queue behind coordd's
// back: it writes the queue's keys directly (redis.InsertJobsForTest), as
// a writer that believes in another partition count would, without
// pushing wake elements.
func insertJobs(t *testing.T, b backends.Backend, queue string, p, n int) {
	t.Helper()
	if err := b.(*redis.Store).InsertJobsForTest(t.Context(), queue, p, n); err != nil {
		t.Fatalf("insert %d jobs into partition %d of queue %s: %v", n, p, queue, err)
	}
}
