package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// TestClaimFollowsAnotherHostsConfigChange: the claim binds the config it
// read last and checks in the statement that it is still the stored one,
// so a visibility timeout changed through another handle applies to the
// next claim, and a queue deleted there is reported absent.
func TestClaimFollowsAnotherHostsConfigChange(t *testing.T) {
	ctx := t.Context()
	a, b := twoHosts(t, backends.Options{})
	for range 2 {
		if _, err := b.Push(ctx, "q", backends.PushRequest{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := a.Claim(ctx, "q", "w1", 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v, %v", first, err)
	}
	if _, err := b.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 1, VisibilityTimeout: time.Hour, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	second, err := a.Claim(ctx, "q", "w2", 1)
	if err != nil || len(second) != 1 {
		t.Fatalf("claim after the change: %v, %v", second, err)
	}
	if d := second[0].ExpiresAt.Sub(first[0].ExpiresAt); d < 50*time.Minute {
		t.Errorf("lease after the change ends %v after the one before it, want about an hour's timeout", d)
	}
	for _, j := range append(first, second...) {
		if err := a.Ack(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteQueue(ctx, "q", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, "q", "w3", 1); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("claim from a deleted queue = %v, want ErrNotFound", err)
	}
}

// TestPushFollowsAnotherHostsConfigChange: a keyless push checks its
// payload and spreads its jobs by the config it read last, and the
// statement inserts only while that is still the stored one, so a
// max_payload or partition count changed through another handle applies
// to the next push.
func TestPushFollowsAnotherHostsConfigChange(t *testing.T) {
	ctx := t.Context()
	a, b := twoHosts(t, backends.Options{})
	if _, err := a.Push(ctx, "q", backends.PushRequest{Payload: []byte("big payload")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutQueue(ctx, backends.QueueConfig{Name: "q", Partitions: 4, VisibilityTimeout: time.Minute, MaxAttempts: 3, MaxPayload: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Push(ctx, "q", backends.PushRequest{Payload: []byte("big payload")}); !errors.Is(err, backends.ErrPayloadTooLarge) {
		t.Errorf("push over the new max_payload = %v, want ErrPayloadTooLarge", err)
	}
	seen := map[int]bool{}
	for range 8 {
		j, err := a.Push(ctx, "q", backends.PushRequest{Payload: []byte("ok")})
		if err != nil {
			t.Fatal(err)
		}
		seen[j.Partition] = true
	}
	if len(seen) != 4 {
		t.Errorf("8 pushes after the change used partitions %v, want all 4", seen)
	}
}
