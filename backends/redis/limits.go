package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// defaultMaxBulk is Redis's default proto-max-bulk-len (512 MB), assumed
// when the server will not say: CONFIG is an admin command that the ACL
// user docs/operations.md recommends cannot run, and managed services often
// rename it. No queue can declare that much (spec.MaxPayloadCap), so the
// fallback never blocks a plan.
const defaultMaxBulk = 512 << 20

// MaxPayload is the server's proto-max-bulk-len: a push sends the payload
// as one argument, and a longer one is refused. When CONFIG GET is refused
// (an error reply, e.g. NOPERM) it is the default, defaultMaxBulk.
func (s *Store) MaxPayload(ctx context.Context) (int64, error) {
	m, err := s.rdb.ConfigGet(ctx, "proto-max-bulk-len").Result()
	var reply goredis.Error
	switch {
	case errors.As(err, &reply):
		return defaultMaxBulk, nil
	case err != nil:
		return 0, fmt.Errorf("redis %q: config get proto-max-bulk-len: %w", s.name, err)
	}
	v, ok := m["proto-max-bulk-len"]
	if !ok {
		return defaultMaxBulk, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("redis %q: proto-max-bulk-len is %q, not a size in bytes", s.name, v)
	}
	return n, nil
}
