package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// What a session-mode semaphore holds, as the store observes and repairs
// it: the slot locks in use, the holders' records, session_slots, and the
// repair pass that wakes waiters a lost release left parked.

const (
	// qSessSetSlots stores session_slots (PutSemaphore).
	qSessSetSlots = "UPDATE `{p}semaphores` SET session_slots = ? WHERE name = ?"

	// qSessRecords reads the holder records of a semaphore.
	qSessRecords = "SELECT session_holders FROM `{p}semaphores` WHERE name = ?"

	// qSessSlotsOf reads session_slots and lim of one semaphore.
	qSessSlotsOf = "SELECT lim, session_slots FROM `{p}semaphores` WHERE name = ?"
)

// usedSlots lists the slots in [0, n) whose lock is held by anyone, with
// IS_USED_LOCK, in statements of up to inChunk locks. It runs on d when d
// is not nil, else through c.
func (s *Store) usedSlots(ctx context.Context, c conn, d *dedicated, name string, n int) ([]int, error) {
	ids, err := s.slotHolders(ctx, c, d, name, n)
	if err != nil {
		return nil, err
	}
	var used []int
	for i, id := range ids {
		if id.Valid {
			used = append(used, i)
		}
	}
	return used, nil
}

// slotHolders returns, for each slot in [0, n), the connection id holding
// its lock (NULL: free).
func (s *Store) slotHolders(ctx context.Context, c conn, d *dedicated, name string, n int) ([]sql.NullInt64, error) {
	out := make([]sql.NullInt64, 0, n)
	for from := 0; from < n; from += inChunk {
		to := min(n, from+inChunk)
		var b strings.Builder
		b.WriteString("SELECT ")
		args := make([]any, 0, to-from)
		dest := make([]any, 0, to-from)
		vals := make([]sql.NullInt64, to-from)
		for i := from; i < to; i++ {
			if i > from {
				b.WriteString(", ")
			}
			b.WriteString("IS_USED_LOCK(?)")
			args = append(args, s.slotLock(name, i))
			dest = append(dest, &vals[i-from])
		}
		var err error
		if d != nil {
			s.pool.CountTrip()
			err = s.interruptible(ctx, d, noDeadline, func(rctx context.Context) error {
				return d.conn.QueryRowContext(rctx, b.String(), args...).Scan(dest...)
			})
		} else {
			err = c.QueryRow(ctx, b.String(), args...).Scan(dest...)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, vals...)
	}
	return out, nil
}

// sessionState adds a semaphore's session holders (slots in [0,
// session_slots) whose lock is held) to st, through c, and returns the
// session_slots value a consistent semaphore has: max(limit, highest held
// slot + 1).
func (s *Store) sessionState(ctx context.Context, c conn, st *backends.SemaphoreState, stored int) (int, error) {
	name := st.Config.Name
	ids, err := s.slotHolders(ctx, c, nil, name, stored)
	if err != nil {
		return 0, err
	}
	var doc sql.NullString
	if err := c.QueryRow(ctx, qSessRecords, name).Scan(&doc); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	type record struct {
		Fencing int64  `json:"fencing"`
		Conn    int64  `json:"conn"`
		Owner   string `json:"owner"`
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		At      int64  `json:"at"`
	}
	recs := map[string]record{}
	if doc.Valid {
		if err := json.Unmarshal([]byte(doc.String), &recs); err != nil {
			return 0, fmt.Errorf("session_holders of %q: %w", name, err)
		}
	}
	want := st.Config.Limit
	for i, id := range ids {
		if !id.Valid {
			continue
		}
		h := backends.Holder{Slot: i, Host: "?", Session: id.Int64}
		if r, ok := recs[strconv.Itoa(i)]; ok && r.Conn == id.Int64 {
			h = backends.Holder{Slot: i, Owner: r.Owner, Host: r.Host, PID: r.PID, Fencing: r.Fencing, AcquiredAt: fromMicros(r.At), Session: id.Int64}
		}
		st.Holders = append(st.Holders, h)
		want = max(want, i+1)
	}
	return want, nil
}

// repairSessionSlots sets session_slots to max(limit, highest held slot +
// 1) for mode session, and to the highest held slot + 1 (0 when none) for a
// semaphore that left mode session while holders remained. Run it holding
// the semaphore row lock.
func (s *Store) repairSessionSlots(ctx context.Context, c conn, name, mode string, limit int) error {
	var lim, stored int
	if err := c.QueryRow(ctx, qSessSlotsOf, name).Scan(&lim, &stored); err != nil {
		return err
	}
	if stored == 0 && mode != spec.ModeSession {
		return nil
	}
	want, n := 0, stored
	if mode == spec.ModeSession {
		want, n = limit, max(stored, limit)
	}
	used, err := s.usedSlots(ctx, c, nil, name, n)
	if err != nil {
		return err
	}
	for _, u := range used {
		want = max(want, u+1)
	}
	if want != stored {
		_, err = c.Exec(ctx, qSessSetSlots, want, name)
	}
	return err
}

// RepairWakeups is the repair pass of parked waiters
// (backends.WakeRepairer): for each named semaphore in mode lease, or in
// mode session with wake kill, that has free slots, it wakes its first
// parked waiters in line, one per free slot. A releaser that died between
// freeing its slot and its KILL, or a session holder whose connection died
// (MySQL frees the slot, and nobody sends a KILL), leaves waiters parked
// until their SLEEP ends; the semaphore package runs this pass when a
// caller starts waiting, and the daemon's leader at start-up and then
// periodically. With nobody parked it costs one processlist query.
func (s *Store) RepairWakeups(ctx context.Context, refs []backends.SemRef) (int, error) {
	ok, err := s.hasSchema(ctx)
	if err != nil || !ok {
		return 0, err
	}
	parked, err := s.parkedChannels(ctx)
	if err != nil || len(parked) == 0 {
		return 0, err
	}
	woken := 0
	for _, ref := range refs {
		if ref.IsInstance() {
			n, err := s.repairInstance(ctx, ref, parked)
			woken += n
			if err != nil {
				return woken, err
			}
			continue
		}
		name := ref.Name
		ch := s.channel("semaphore", name)
		if !parked[ch] {
			continue
		}
		var lim, stored int
		var mode, wake string
		err := s.on(nil).QueryRow(ctx, qSessMode, name).Scan(&mode, &lim, &stored, &wake)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return woken, err
		}
		var held int
		switch {
		case mode != spec.ModeSession:
			// Lease mode: a parked waiter checks its turn itself.
			err = s.on(nil).QueryRow(ctx, qSemLiveHolders, name).Scan(&held)
		case wake == spec.WakeKill:
			var used []int
			used, err = s.usedSlots(ctx, s.on(nil), nil, name, max(stored, lim))
			held = len(used)
		default:
			continue
		}
		if err != nil {
			return woken, err
		}
		if held >= lim {
			continue
		}
		n, err := s.wakeParked(ctx, ch, lim-held)
		woken += n
		if err != nil {
			return woken, err
		}
	}
	return woken, nil
}
