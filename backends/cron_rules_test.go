package backends

import (
	"errors"
	"testing"
	"time"
)

func TestClaimBatchRefusesManualAndInvalidInPlace(t *testing.T) {
	reqs := []ClaimRequest{
		{Task: "a", Attempt: 1, Owner: "o", Lease: time.Second},
		{Task: "m", Attempt: 1, Owner: "o", Lease: time.Second, Manual: true},
		{Task: "", Attempt: 1, Owner: "o", Lease: time.Second},
		{Task: "s", Attempt: 1, Owner: "o", Skip: "overlap"}, // a skip needs no lease
		{Task: "l", Attempt: 1, Owner: "o"},
	}
	var sent []string
	res, err := ClaimBatch(reqs, func(batch []ClaimRequest) ([]ClaimResult, error) {
		out := make([]ClaimResult, len(batch))
		for i, r := range batch {
			sent = append(sent, r.Task)
			out[i].Occurrence.Task = r.Task
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 || sent[0] != "a" || sent[1] != "s" {
		t.Fatalf("sent %v, want [a s] in order", sent)
	}
	if res[0].Occurrence.Task != "a" || res[3].Occurrence.Task != "s" {
		t.Fatalf("results out of place: %+v", res)
	}
	if !errors.Is(res[1].Err, ErrUnsupported) {
		t.Fatalf("manual: %v, want ErrUnsupported", res[1].Err)
	}
	if res[2].Err == nil || res[4].Err == nil {
		t.Fatalf("invalid requests claimed: %v, %v", res[2].Err, res[4].Err)
	}
	called := false
	res, err = ClaimBatch(reqs[1:3], func([]ClaimRequest) ([]ClaimResult, error) { called = true; return nil, nil })
	if err != nil || called || len(res) != 2 {
		t.Fatalf("nothing to send: called %v, %d results, %v", called, len(res), err)
	}
}

func TestClaimRefusalsWrapTheirSentinels(t *testing.T) {
	req := ClaimRequest{Task: "t", Attempt: 2, ScheduledAt: time.Unix(0, 0)}
	for r, want := range map[ClaimRefusal]error{
		ClaimTaskAbsent: ErrNotFound, ClaimNextMoved: ErrConflict, ClaimTaken: ErrConflict,
		ClaimPreviousNotFailed: ErrConflict, ClaimNoManualTime: ErrConflict, ClaimRunLive: ErrHeld, ClaimPaused: ErrPaused,
	} {
		if err := r.Err(req); !errors.Is(err, want) || !Refused(err) {
			t.Errorf("refusal %d: %v, want %v and a refusal", r, err, want)
		}
	}
	if err := ClaimRefusal(0).Err(req); Refused(err) {
		t.Errorf("an unknown refusal reads as a refusal: %v", err)
	}
	if !Refused(ErrNotExpired) {
		t.Error("ErrNotExpired is not a conflict")
	}
}

func TestOutputTailKeepsTheEnd(t *testing.T) {
	out := make([]byte, MaxRunOutput+10)
	out[len(out)-1] = 'x'
	if got := OutputTail(out); len(got) != MaxRunOutput || got[len(got)-1] != 'x' {
		t.Fatalf("tail of %d bytes: %d bytes", len(out), len(got))
	}
	if got := OutputTail([]byte("ok")); string(got) != "ok" {
		t.Fatalf("short output: %q", got)
	}
}
