package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestMaxPayload: the bound is the server's proto-max-bulk-len, and a
// payload of exactly that size is pushed and read back; an ACL user that
// may not run CONFIG gets Redis's default, 512 MB.
func TestMaxPayload(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t, "--proto-max-bulk-len", "1mb")
	admin := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})
	defer admin.Close()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "coordd"}, splitRules(aclRules)...)...).Err(); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port), "coordd:", backends.Options{Version: "0.1.0"})
	bound, err := s.MaxPayload(ctx)
	if err != nil || bound != 1<<20 {
		t.Fatalf("MaxPayload = %d, %v; want 1 MiB, the server's proto-max-bulk-len", bound, err)
	}
	cfg := backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		Unique: spec.UniquePending, MaxPayload: bound, Claim: spec.ClaimPartition}
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{0xff, '\'', 0}, int(bound)/3)
	payload = append(payload, make([]byte, int(bound)-len(payload))...)
	if _, err := s.Push(ctx, "q", backends.PushRequest{Key: "k", Payload: payload}); err != nil {
		t.Fatalf("push of %d bytes (the bound): %v", bound, err)
	}
	jobs, err := s.Claim(ctx, "q", "w", 1)
	if err != nil || len(jobs) != 1 || !bytes.Equal(jobs[0].Payload, payload) {
		t.Fatalf("claim = %d jobs, %v; want the %d-byte job back", len(jobs), err, bound)
	}

	acl := openStore(t, fmt.Sprintf("redis://coordd:s3cret@127.0.0.1:%d/0", r.Port), "coordd:", backends.Options{Version: "0.1.0"})
	if bound, err := acl.MaxPayload(ctx); err != nil || bound != 512<<20 {
		t.Fatalf("MaxPayload for a user without CONFIG = %d, %v; want the 512 MB default", bound, err)
	}
}
