package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

// The host registry lives under the {global} hash tag in two keys: a hash
// of host id -> record (JSON whose values are all strings, since Redis's
// cjson keeps only 14 significant digits of a number), and a sorted set of
// host id -> last seen (µs of TIME) that the prune reads by score. Both are
// written by one script, so they never disagree.
func (k keys) hostRecords() string { return k.global("hosts") }
func (k keys) hostsSeen() string   { return k.global("hosts:seen") }

// hostBeatScript upserts one host's record at the server's TIME
// (lua/host_beat.lua).
var hostBeatScript = luaScript("host_beat.lua")

// hostsListScript reads every record and the server's clock (read-only;
// lua/hosts_list.lua).
var hostsListScript = luaScript("hosts_list.lua")

// hostsPruneScript deletes the records last seen before TIME minus a
// duration, from both keys (lua/hosts_prune.lua).
var hostsPruneScript = luaScript("hosts_prune.lua")

// hostRecord is a record as the scripts store it.
type hostRecord struct {
	RunID       string `json:"run_id"`
	PID         int    `json:"pid,string"`
	Version     string `json:"version"`
	SpecHash    string `json:"spec_hash"`
	HeartbeatNs int64  `json:"heartbeat_ns,string"`
	Stopped     string `json:"stopped"`
	StartedUs   int64  `json:"started_us,string"`
	SeenUs      int64  `json:"seen_us,string"`
}

// Heartbeat upserts rec with last seen (and, for a new record or run id,
// the start time) at the server's TIME. One script, one round trip.
func (s *Store) Heartbeat(ctx context.Context, rec backends.HostRecord) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := backends.CheckHeartbeat(rec); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	stopped := "0"
	if rec.Stopped {
		stopped = "1"
	}
	err := hostBeatScript.Run(ctx, s.rdb, []string{s.keys.hostRecords(), s.keys.hostsSeen()},
		rec.Host, rec.RunID, strconv.Itoa(rec.PID), rec.Version, rec.SpecHash,
		strconv.FormatInt(int64(rec.HeartbeatEvery), 10), stopped).Err()
	if err != nil {
		return fmt.Errorf("heartbeat %q: %w", rec.Host, err)
	}
	return nil
}

// ListHosts reads every record, sorted by host id, and the server's clock
// in one read-only script.
func (s *Store) ListHosts(ctx context.Context) (backends.Hosts, error) {
	res, err := hostsListScript.RunRO(ctx, s.rdb, []string{s.keys.hostRecords()}).Slice()
	if err != nil {
		return backends.Hosts{}, fmt.Errorf("list hosts: %w", err)
	}
	if len(res) != 2 {
		return backends.Hosts{}, fmt.Errorf("list hosts: unexpected reply %v", res)
	}
	out := backends.Hosts{Now: fromMicros(toInt(res[0]))}
	flat, _ := res[1].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		var r hostRecord
		if err := json.Unmarshal([]byte(toString(flat[i+1])), &r); err != nil {
			return backends.Hosts{}, fmt.Errorf("list hosts: record of %q: %w", toString(flat[i]), err)
		}
		out.Hosts = append(out.Hosts, backends.HostRecord{
			Host: toString(flat[i]), RunID: r.RunID, PID: r.PID, Version: r.Version, SpecHash: r.SpecHash,
			HeartbeatEvery: time.Duration(r.HeartbeatNs), Stopped: r.Stopped == "1",
			StartedAt: fromMicros(r.StartedUs), LastSeen: fromMicros(r.SeenUs),
		})
	}
	slices.SortFunc(out.Hosts, func(a, b backends.HostRecord) int { return strings.Compare(a.Host, b.Host) })
	return out, nil
}

// PruneHosts deletes the records not seen for olderThan of server time.
func (s *Store) PruneHosts(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := s.writable(); err != nil {
		return 0, fmt.Errorf("prune hosts: %w", err)
	}
	n, err := hostsPruneScript.Run(ctx, s.rdb, []string{s.keys.hostRecords(), s.keys.hostsSeen()},
		usArg(olderThan.Microseconds())).Int()
	if err != nil {
		return 0, fmt.Errorf("prune hosts: %w", err)
	}
	return n, nil
}

// LastApply reads the latest apply record (one LINDEX); nil before the
// first apply.
func (s *Store) LastApply(ctx context.Context) (*backends.ApplyRecord, error) {
	v, err := s.rdb.LIndex(ctx, s.keys.stateLog(), -1).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last apply: %w", err)
	}
	var r stateRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("last apply: %w", err)
	}
	a := r.apply()
	return &a, nil
}
