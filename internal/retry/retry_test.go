package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

func TestFinal(t *testing.T) {
	blip := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		errs    []error // op's results, in order; nil afterwards
		budget  time.Duration
		calls   int // 0: at least two (timing decides how many)
		wantErr error
	}{
		{"ok at once", nil, Budget, 1, nil},
		{"ok after two failures", []error{blip, blip}, Budget, 3, nil},
		{"lost is final", []error{blip, fmt.Errorf("release: %w", backends.ErrLost), blip}, Budget, 2, backends.ErrLost},
		{"budget spent", []error{blip, blip, blip, blip, blip, blip, blip, blip}, 150 * time.Millisecond, 0, blip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, reported := 0, 0
			var last time.Duration = -1
			err := Final(t.Context(), tc.budget, func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			}, func(err error, next time.Duration) {
				reported++
				last = next
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if (tc.calls != 0 && calls != tc.calls) || (tc.calls == 0 && (calls < 2 || calls == len(tc.errs))) || reported != calls-btoi(err == nil) {
				t.Fatalf("%d calls, %d reported failures; want %d calls", calls, reported, tc.calls)
			}
			if err != nil && last != 0 {
				t.Fatalf("the last report of a failure that was given up says next %v, want 0", last)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
