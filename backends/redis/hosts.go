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

var _ backends.HostRegistry = (*Store)(nil)

// The host registry lives under the {global} hash tag in two keys: a hash
// of host id -> record (JSON whose values are all strings, since Redis's
// cjson keeps only 14 significant digits of a number), and a sorted set of
// host id -> last seen (µs of TIME) that the prune reads by score. Both are
// written by one script, so they never disagree.
func (k keys) hostRecords() string { return k.global("hosts") }
func (k keys) hostsSeen() string   { return k.global("hosts:seen") }

// hostBeatScript upserts one host's record at the server's TIME. The start
// time is kept while the stored record has the same run id (the same
// daemon process) and is TIME otherwise.
//
//	KEYS[1] the records (hash: host -> record JSON)
//	KEYS[2] last seen (sorted set: host -> µs)
//	ARGV[1] host, ARGV[2] run id, ARGV[3] pid, ARGV[4] version,
//	ARGV[5] spec hash, ARGV[6] heartbeat period in ns, ARGV[7] stopped ("1" or "0")
//
// Returns the time of the heartbeat in µs.
var hostBeatScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nows = string.format('%d', now)
local started = nows
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ok, old = pcall(cjson.decode, cur)
  if ok and type(old) == 'table' and old.run_id == ARGV[2] and type(old.started_us) == 'string' then
    started = old.started_us
  end
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({run_id = ARGV[2], pid = ARGV[3], version = ARGV[4],
  spec_hash = ARGV[5], heartbeat_ns = ARGV[6], stopped = ARGV[7], started_us = started, seen_us = nows}))
redis.call('ZADD', KEYS[2], nows, ARGV[1])
return now
`)

// hostsListScript reads every record and the server's clock (read-only).
//
//	KEYS[1] the records
//
// Returns {now µs, {host, record, host, record, ...}}.
var hostsListScript = goredis.NewScript(`
local t = redis.call('TIME')
return {tonumber(t[1]) * 1000000 + tonumber(t[2]), redis.call('HGETALL', KEYS[1])}
`)

// hostsPruneScript deletes the records last seen before TIME minus a
// duration, from both keys.
//
//	KEYS[1] the records, KEYS[2] last seen
//	ARGV[1] the duration in µs
//
// Returns how many records it deleted.
var hostsPruneScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
local i = 1
while i <= #old do
  local j = math.min(i + 499, #old)
  redis.call('HDEL', KEYS[1], unpack(old, i, j))
  redis.call('ZREM', KEYS[2], unpack(old, i, j))
  i = j + 1
end
return #old
`)

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
