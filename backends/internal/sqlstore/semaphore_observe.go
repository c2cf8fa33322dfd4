package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

var (
	// qSemObserveConfigs reads the configs of many semaphores, and on
	// MySQL the number of its named-lock slots (session_slots; 0 on a
	// store without them).
	qSemObserveConfigs = Query{
		SQL:   `SELECT name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed, 0 FROM {p}semaphores WHERE name {in}`,
		MySQL: `SELECT name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed, session_slots FROM {p}semaphores WHERE name {in}`,
	}

	// qSemObserveSlots reads every slot row of many semaphores, each with
	// whether it is live, against one instant.
	qSemObserveSlots = slotQuery(`SELECT name, slot, owner, host, pid, fencing, acquired_at, expires_at, {live}
FROM {p}semaphore_slots WHERE name {in} ORDER BY name, slot`)

	// qSemObserveWaiters counts the live waiters of many semaphores.
	qSemObserveWaiters = Query{SQL: `SELECT name, count(*) FROM {p}semaphore_waiters
WHERE name {in} AND expires_at > {now} GROUP BY name`}
)

// ObserveSemaphores reads many semaphores in one snapshot: per list of
// names, one statement each for the configs, the slot rows, the waiters
// and the holders and waiters of keyed semaphores' instances.
func (s *Core) ObserveSemaphores(ctx context.Context, names []string) (map[string]*backends.SemaphoreState, error) {
	out := make(map[string]*backends.SemaphoreState, len(names))
	if len(names) == 0 {
		return out, nil
	}
	d := s.DB.Dialect()
	_, err := s.DB.Read(ctx, func(c Conn) error {
		clear(out)
		for _, l := range ListChunks(d, names) {
			if _, err := ObserveSemaphoreRows(ctx, c, d, l, out); err != nil {
				return err
			}
			if err := ObserveInstances(ctx, c, d, l, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe semaphores: %w", err)
	}
	return out, nil
}

// ObserveSemaphoreRows adds the semaphores named (one list for {in}) to
// out, as their rows say: config, slot rows and live waiters. It returns
// the session_slots of those that have named-lock slots (MySQL's mode
// session, or holders left from it), which the store adds itself.
func ObserveSemaphoreRows(ctx context.Context, c Conn, d *Dialect, names []string, out map[string]*backends.SemaphoreState) (map[string]int, error) {
	rows, err := QueryIn(ctx, c, d, qSemObserveConfigs, names)
	if err != nil {
		return nil, err
	}
	var sessSlots map[string]int
	for rows.Next() {
		var cfg backends.SemaphoreConfig
		var lease, maxHold int64
		var n int
		if err := rows.Scan(&cfg.Name, &cfg.Limit, &lease, &cfg.Mode, &cfg.Wake, &cfg.MaxWaiting, &maxHold, &cfg.Keyed, &n); err != nil {
			rows.Close()
			return nil, err
		}
		cfg.Lease, cfg.MaxHold = time.Duration(lease), time.Duration(maxHold)
		out[cfg.Name] = &backends.SemaphoreState{Config: cfg}
		if n > 0 || cfg.Mode == spec.ModeSession {
			if sessSlots == nil {
				sessSlots = map[string]int{}
			}
			sessSlots[cfg.Name] = n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := observeSlotRows(ctx, c, d, names, out); err != nil {
		return nil, err
	}
	if rows, err = QueryIn(ctx, c, d, qSemObserveWaiters, names); err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		if st := out[name]; st != nil {
			st.Waiters = n
		}
	}
	return sessSlots, rows.Err()
}

// observeSlotRows adds the slot rows of the semaphores named to their
// states: each to Slots, the live ones to Holders, the expired ones to
// Expired.
func observeSlotRows(ctx context.Context, c Conn, d *Dialect, names []string, out map[string]*backends.SemaphoreState) error {
	rows, err := QueryIn(ctx, c, d, qSemObserveSlots, names)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var h backends.Holder
		var owner sql.NullString
		var acq, exp int64
		var live bool
		if err := rows.Scan(&name, &h.Slot, &owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp, &live); err != nil {
			return err
		}
		st := out[name]
		if st == nil {
			continue // slot rows of a semaphore row that is gone
		}
		st.Slots++
		switch {
		case live:
			h.Owner, h.AcquiredAt, h.ExpiresAt = owner.String, FromMicros(acq), FromMicros(exp)
			st.Holders = append(st.Holders, h)
		case owner.Valid:
			st.Expired++
		}
	}
	return rows.Err()
}
