package sqlstore

import (
	"context"

	"github.com/coordd/coordd/backends"
)

var (
	// qInstObserveHolders reads the live holders of every instance of
	// many semaphores.
	qInstObserveHolders = Query{SQL: `SELECT name, ikey, slot, owner, host, pid, fencing, acquired_at, expires_at FROM {p}semaphore_instance_slots
WHERE name {in} AND expires_at > {now} ORDER BY name, ikey, slot`}

	// qInstObserveWaiters counts the live waiters of every instance of
	// many semaphores.
	qInstObserveWaiters = Query{SQL: `SELECT name, ikey, count(*) FROM {p}semaphore_instance_waiters
WHERE name {in} AND expires_at > {now} GROUP BY name, ikey ORDER BY name, ikey`}
)

// instanceKey names one instance while ObserveInstances gathers them.
type instanceKey struct{ name, key string }

// ObserveInstances adds the live instances of the semaphores named (one
// list for {in}) to their states in out: every instance's holders to
// Holders, its waiters to Waiters, and the instance to Instances. A keyed
// semaphore's Slots is then what it should be: it has no slot row to
// drift.
func ObserveInstances(ctx context.Context, c Conn, d *Dialect, names []string, out map[string]*backends.SemaphoreState) error {
	inst := map[instanceKey]*backends.InstanceState{}
	var order []instanceKey
	get := func(name, key string) *backends.InstanceState {
		k := instanceKey{name, key}
		if inst[k] == nil {
			inst[k] = &backends.InstanceState{Key: key}
			order = append(order, k)
		}
		return inst[k]
	}
	rows, err := QueryIn(ctx, c, d, qInstObserveHolders, names)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		var h backends.Holder
		var acq, exp int64
		if err := rows.Scan(&name, &h.Key, &h.Slot, &h.Owner, &h.Host, &h.PID, &h.Fencing, &acq, &exp); err != nil {
			rows.Close()
			return err
		}
		h.AcquiredAt, h.ExpiresAt = FromMicros(acq), FromMicros(exp)
		is := get(name, h.Key)
		is.Holders = append(is.Holders, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = QueryIn(ctx, c, d, qInstObserveWaiters, names); err != nil {
		return err
	}
	for rows.Next() {
		var name, key string
		var n int
		if err := rows.Scan(&name, &key, &n); err != nil {
			rows.Close()
			return err
		}
		get(name, key).Waiters = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, k := range order {
		if st := out[k.name]; st != nil {
			is := inst[k]
			st.Holders = append(st.Holders, is.Holders...)
			st.Waiters += is.Waiters
			st.Instances = append(st.Instances, *is)
		}
	}
	for _, n := range names {
		if st := out[n]; st != nil && st.Config.Keyed {
			backends.SortInstances(st.Instances)
			st.Slots = st.WantSlots()
		}
	}
	return nil
}
