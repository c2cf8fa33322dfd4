package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
)

// Who waits: beside each line (wseq, wexp) a hash winfo, the line's key
// with "wseq" replaced by "winfo" (so under the same hash tag, and under an
// instance's "i:<key>:" when the line is an instance's), maps a waiter's
// owner to "<since µs> <pid> <host>" (since 0: unknown, a record entered by
// a binary from before it). The enter scripts write it; nothing else
// touches it (winfo_put, lua/lib/waiter_info.lua). A field outlives its
// waiter's record (a grant or a leave removes the record only): it is never
// listed, since the list follows wseq and wexp, and the enter scripts sweep
// such fields once they outnumber the live waiters twice over. The hash
// expires with the line's latest waiter record, and an idle instance's
// settle deletes it.

// waiterListScript lists the live waiters of one line in line order, as
// pairs {expiry µs, info} (lua/waiter_list.lua).
var waiterListScript = luaScript("waiter_list.lua")

// ListWaiters lists the live waiters of semaphore or instance name in line
// order (backends.Waiters). For a keyed semaphore each instance's
// line is read on its own: the list is not one snapshot.
func (s *Store) ListWaiters(ctx context.Context, ref backends.SemRef) ([]backends.Waiter, error) {
	name := ref.Name
	if ref.IsInstance() {
		k := s.keys.instance(name, ref.Key)
		ws, err := s.listLine(ctx, ref.Key, k[instKeyWseq], k[instKeyWseq+1])
		if err != nil {
			return nil, s.instErr("list waiters", name, ref.Key, err)
		}
		return ws, nil
	}
	k := s.semKeys(name)
	ws, err := s.listLine(ctx, "", k[semKeyWseq], k[semKeyWseq+1])
	if err != nil {
		return nil, s.semErr("list waiters", name, err)
	}
	ikeys, err := s.rdb.ZRange(ctx, s.keys.instIndex(name), 0, -1).Result()
	if err != nil {
		return nil, s.semErr("list waiters", name, err)
	}
	for _, key := range ikeys {
		k := s.keys.instance(name, key)
		iw, err := s.listLine(ctx, key, k[instKeyWseq], k[instKeyWseq+1])
		if err != nil {
			return nil, s.instErr("list waiters", name, key, err)
		}
		ws = append(ws, iw...)
	}
	sortWaiters(ws)
	return ws, nil
}

// listLine reads one line with waiterListScript.
func (s *Store) listLine(ctx context.Context, key, wseq, wexp string) ([]backends.Waiter, error) {
	v, err := waiterListScript.Run(ctx, s.rdb, []string{wseq, wexp}).StringSlice()
	if err != nil {
		return nil, err
	}
	var ws []backends.Waiter
	for i := 0; i+1 < len(v); i += 2 {
		w := backends.Waiter{Key: key, Place: len(ws) + 1}
		if exp, err := strconv.ParseFloat(v[i], 64); err == nil {
			w.ExpiresAt = time.UnixMicro(int64(exp)).UTC()
		}
		since, rest, _ := strings.Cut(v[i+1], " ")
		pid, host, _ := strings.Cut(rest, " ")
		if us, err := strconv.ParseInt(since, 10, 64); err == nil && us > 0 {
			w.Since = time.UnixMicro(us).UTC()
		}
		w.PID, _ = strconv.Atoi(pid)
		w.Host = host
		ws = append(ws, w)
	}
	return ws, nil
}

// sortWaiters orders waiters by key, each line in place order, as the SQL
// backends list them (the index of instances is ordered by expiry).
func sortWaiters(ws []backends.Waiter) {
	slices.SortStableFunc(ws, func(a, b backends.Waiter) int { return strings.Compare(a.Key, b.Key) })
}
