package memcached

// Reading semaphores: Holders and ObserveSemaphores.

import (
	"context"
	"fmt"
	"slices"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// Holders lists live holders by slot; an absent semaphore has none, and
// neither has an instance (TryAcquire grants none here).
func (s *Store) Holders(ctx context.Context, ref backends.SemRef) ([]backends.Holder, error) {
	if ref.IsInstance() {
		return nil, nil
	}
	st, err := s.observe(ctx, ref.Name)
	if err != nil || st == nil {
		return nil, err
	}
	return st.Holders, nil
}

// ObserveSemaphores reads each semaphore with one multi-get (two when its
// span exceeds guessSpan). Slots is max(limit, held) when the config and
// fencing keys exist; when the fencing key vanished it is the number held,
// so that a plan shows the drift and reconcile's PutSemaphore re-creates
// the key. A vanished config key is an absent semaphore.
func (s *Store) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	for _, n := range names {
		st, err := s.observe(ctx, n)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out[n] = st
		}
	}
	return out, nil
}

func (s *Store) observe(ctx context.Context, name string) (*backends.SemaphoreState, error) {
	r, err := s.read(ctx, name, guessSpan)
	if err != nil {
		return nil, s.semErr("observe", name, err)
	}
	if r.cfg == nil {
		return nil, nil
	}
	st := &backends.SemaphoreState{Config: r.cfg.SemaphoreConfig}
	if r.cfg.Mode == spec.ModeCounter {
		if h, ok := r.counterHolder(); ok {
			st.Holders = []backends.Holder{h}
		}
	} else {
		for slot, it := range r.slots {
			h, err := decodeHolder(it.Value)
			if err != nil {
				return nil, s.semErr("observe", name, fmt.Errorf("slot %d: %w", slot, err))
			}
			h.Slot = slot
			st.Holders = append(st.Holders, h)
		}
		slices.SortFunc(st.Holders, func(a, b backends.Holder) int { return a.Slot - b.Slot })
	}
	st.Slots = len(st.Holders)
	if r.fencing {
		st.Slots = st.WantSlots()
	}
	return st, nil
}
