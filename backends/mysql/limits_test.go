package mysql_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// TestMaxPayloadIsTrue: a payload of exactly the reported bound, every
// byte of which the driver escapes (so the statement is twice its size),
// with the longest queue name and key, is pushed and read back. With the
// server's default max_allowed_packet (16 MiB) the bound is below 8.5 MB,
// which a queue could declare before; with a smaller maxAllowedPacket in
// the DSN the driver's own limit is the one that counts.
func TestMaxPayloadIsTrue(t *testing.T) {
	for _, param := range []string{"", "maxAllowedPacket=1048576"} {
		t.Run("dsn "+param, func(t *testing.T) {
			ctx := t.Context()
			dsn := testenv.MySQLDSN(t)
			if param != "" {
				dsn = withParam(dsn, param)
			}
			s := migrated(t, dsn, "coordd_")
			var packet int64
			if err := s.DB().QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&packet); err != nil {
				t.Fatal(err)
			}
			if param != "" {
				packet = min(packet, 1048576)
			}
			bound, err := s.MaxPayload(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if bound <= 0 || bound >= packet/2 {
				t.Fatalf("MaxPayload = %d with a packet limit of %d, want a positive bound below half of it", bound, packet)
			}
			name := strings.Repeat("q", spec.MaxNameLen)
			cfg := backends.QueueConfig{Name: name, Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3,
				Unique: spec.UniquePending, MaxPayload: bound, Claim: spec.ClaimPartition}
			if _, err := s.PutQueue(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			payload := bytes.Repeat([]byte{'\''}, int(bound))
			key := strings.Repeat("'", spec.MaxKeyLen)
			if _, err := s.Push(ctx, name, backends.PushRequest{Key: key, Payload: payload}); err != nil {
				t.Fatalf("push of %d bytes (the bound): %v", bound, err)
			}
			jobs, err := s.Claim(ctx, name, "w", 1)
			if err != nil || len(jobs) != 1 || !bytes.Equal(jobs[0].Payload, payload) || jobs[0].Key != key {
				t.Fatalf("claim = %d jobs, %v; want the %d-byte job back", len(jobs), err, bound)
			}
		})
	}
}
