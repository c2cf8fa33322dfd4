package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.Crons = (*Store)(nil)

// cronMaxOutput is the most of a run's output that FinishOccurrence keeps:
// the tail, where the error usually is.
const cronMaxOutput = 64 << 10

// An occurrence is identified within its task by "<scheduled_at µs>:
// <attempt>", its id. Its record is a JSON object in the task's occ hash,
// written by the scripts with cjson; every number in it is a string,
// because cjson would round microseconds to 14 digits. The record of a
// running occurrence holds no expiry (extending the lease must not change
// it): the lease is the score of the id in the task's run set and of the
// record itself in the leases set, which is what lets ExpiredOccurrences
// list expired runs of every task from one key.
//
// Every script that changes an occurrence takes the same keys, in this
// order (cronKeys builds them):
//
//	KEYS[1]  the schedule (zset: name -> next_exec µs)
//	KEYS[2]  the definitions (hash: name -> def)
//	KEYS[3]  the fencing counters (hash: name -> last number)
//	KEYS[4]  the leases (zset: running record -> run lease expiry µs)
//	KEYS[5]  the pending retries (zset: record of an attempt that ended
//	         failed, timeout or lost and has no later attempt -> finished µs)
//	KEYS[6]  the history limits (hash: name -> limit)
//	KEYS[7]  the task's records (hash: id -> record JSON)
//	KEYS[8]  the task's outputs (hash: id -> output)
//	KEYS[9]  the task's history (zset: id -> fencing, all records)
//	KEYS[10] the task's finished records (zset: id -> fencing)
//	KEYS[11] the task's running records (zset: id -> run lease expiry µs)
//
// and ARGV[1] is always the task's name.
func (s *Store) cronKeys(task string) []string {
	k := s.keys
	return []string{k.cronNext(), k.cronDefs(), k.cronFencing(), k.cronLeases(), k.cronRetries(), k.cronLimits(),
		k.cronTask(task, "occ"), k.cronTask(task, "out"), k.cronTask(task, "hist"), k.cronTask(task, "done"), k.cronTask(task, "run")}
}

// cronLuaNow sets now (a number) and nows (its text) to the server's TIME
// in microseconds.
const cronLuaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nows = string.format('%d', now)
`

// cronLuaTrim defines trim(), which deletes the task's oldest finished
// records beyond its history limit (100 when the task is gone), with
// their output and their pending-retry entries; running records are never
// deleted. A record's text is JSON written by these scripts, so a status
// found as '"status":"succeeded"' is that field (a quote inside a string
// value is escaped); such a record was never a pending retry.
const cronLuaTrim = `
local function trim()
  local stop = -1 - tonumber(redis.call('HGET', KEYS[6], ARGV[1]) or '100')
  local ids = redis.call('ZRANGE', KEYS[10], 0, stop)
  if #ids == 0 then return end
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', KEYS[7], id)
    if rec and not string.find(rec, '"status":"succeeded"', 1, true) and not string.find(rec, '"status":"skipped"', 1, true) then
      redis.call('ZREM', KEYS[5], rec)
    end
  end
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    redis.call('HDEL', KEYS[7], unpack(ids, i, j))
    redis.call('HDEL', KEYS[8], unpack(ids, i, j))
    redis.call('ZREM', KEYS[9], unpack(ids, i, j))
  end
  redis.call('ZREMRANGEBYRANK', KEYS[10], 0, stop)
end
`

// cronLuaFinal defines failed(status): the statuses that make an attempt
// a pending retry.
const cronLuaFinal = `
local function failed(status)
  return status == 'failed' or status == 'timeout' or status == 'lost'
end
`

// cronClaimScript claims one attempt: the compare-and-swap on next_exec
// (scheduled attempt 1), the check of the previous attempt (retries) or the
// choice of a free time (manual attempt 1), the fencing number and the
// record, written with SET NX semantics on (task, scheduled_at, attempt),
// all in one atomic step. Nothing is written unless the claim succeeds.
//
// The fencing counter follows the data-loss rule: when the task's counter
// is missing (a new task, a flush, a restart without persistence) it is
// first set to the server's TIME in µs, so the number handed out is above
// any the task held before (one claim per µs is far faster than claims
// come).
//
//	KEYS as for every occurrence script (see cronKeys)
//	ARGV[1] task, ARGV[2] mode: "s" scheduled attempt 1, "r" a later
//	attempt, "m" manual attempt 1
//	ARGV[3] scheduled_at µs (mode m: ignored, backend now is used, moved a
//	µs at a time past an existing attempt 1 or the pending next_exec)
//	ARGV[4] next_exec µs after the claim ("" none; mode s only)
//	ARGV[5] attempt, ARGV[6] run id, ARGV[7] owner, ARGV[8] host
//	ARGV[9] manual ("1" or "0"), ARGV[10] lease µs
//	ARGV[11] skip reason ("" to run): the record is written as skipped and
//	finished, without a lease, and the history is trimmed
//
// Returns {0, fencing, scheduled_at µs, started µs, expires µs} when
// claimed, or {code}: 1 the task is absent, 2 next_exec is no longer
// scheduled_at, 3 the attempt exists, 4 the previous attempt has not ended
// unsuccessfully, 5 no free time for a manual run.
var cronClaimScript = goredis.NewScript(cronLuaNow + cronLuaTrim + cronLuaFinal + `
local name = ARGV[1]
local attempt = tonumber(ARGV[5])
local sched = ARGV[3]
local prev
-- A task is in the schedule only while its definition exists (PutCron and
-- DeleteCron write both), so a matching next_exec proves the task exists.
if ARGV[2] == 's' then
  local cur = redis.call('ZSCORE', KEYS[1], name)
  if not cur or tonumber(cur) ~= tonumber(sched) then
    if redis.call('HEXISTS', KEYS[2], name) == 0 then return {1} end
    return {2}
  end
elseif redis.call('HEXISTS', KEYS[2], name) == 0 then
  return {1}
elseif ARGV[2] == 'r' then
  prev = redis.call('HGET', KEYS[7], sched .. ':' .. string.format('%d', attempt - 1))
  if not prev or not failed(cjson.decode(prev).status) then return {4} end
else
  local nx = redis.call('ZSCORE', KEYS[1], name)
  nx = nx and tonumber(nx)
  sched = nil
  for s = now, now + 999 do
    local ss = string.format('%d', s)
    if nx ~= s and redis.call('HEXISTS', KEYS[7], ss .. ':1') == 0 then
      sched = ss
      break
    end
  end
  if not sched then return {5} end
end
local id = sched .. ':' .. ARGV[5]
if redis.call('HEXISTS', KEYS[7], id) == 1 then return {3} end

-- A live counter is far above 1 (it starts at TIME in µs), so 1 means it
-- was missing: recreate it above anything it held before.
local fencing = redis.call('HINCRBY', KEYS[3], name, 1)
if fencing == 1 then
  fencing = now + 1
  redis.call('HSET', KEYS[3], name, string.format('%d', fencing))
end
local fs = string.format('%d', fencing)
local rec = {task = name, sched = sched, attempt = ARGV[5], run_id = ARGV[6], fencing = fs,
  manual = ARGV[9] == '1', owner = ARGV[7], host = ARGV[8], started = nows}
local exp = now
if ARGV[11] == '' then
  rec.status = 'running'
  exp = now + tonumber(ARGV[10])
else
  rec.status = 'skipped'
  rec.error = ARGV[11]
  rec.exit_code = '0'
  rec.finished = nows
  rec.expires = nows
end
local text = cjson.encode(rec)
redis.call('HSET', KEYS[7], id, text)
redis.call('ZADD', KEYS[9], fencing, id)
if ARGV[2] == 's' then
  if ARGV[4] == '' then
    redis.call('ZREM', KEYS[1], name)
  else
    redis.call('ZADD', KEYS[1], ARGV[4], name)
  end
end
if prev then redis.call('ZREM', KEYS[5], prev) end
if ARGV[11] == '' then
  redis.call('ZADD', KEYS[11], exp, id)
  redis.call('ZADD', KEYS[4], exp, text)
else
  redis.call('ZADD', KEYS[10], fencing, id)
  trim()
end
return {0, fencing, tonumber(sched), now, exp}
`)

// cronExtendScript renews a run lease, only for its owner, only while the
// run is running and its lease unexpired.
//
//	KEYS as for every occurrence script (see cronKeys)
//	ARGV[1] task, ARGV[2] id, ARGV[3] owner, ARGV[4] lease µs
//
// Returns the new expiry in µs, or 0 when owner does not hold the run.
var cronExtendScript = goredis.NewScript(cronLuaNow + `
local text = redis.call('HGET', KEYS[7], ARGV[2])
if not text then return 0 end
local rec = cjson.decode(text)
if rec.status ~= 'running' or rec.owner ~= ARGV[3] then return 0 end
local exp = tonumber(redis.call('ZSCORE', KEYS[11], ARGV[2]) or '0')
if exp <= now then return 0 end
exp = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[11], exp, ARGV[2])
redis.call('ZADD', KEYS[4], exp, text)
return exp
`)

// cronFinishScript records the result of a run still running under its
// owner (expired or not, as long as nobody reaped it), moves it from the
// running sets to the finished one (and to the pending retries when it
// failed), and trims the task's history.
//
//	KEYS as for every occurrence script (see cronKeys)
//	ARGV[1] task, ARGV[2] id, ARGV[3] owner, ARGV[4] status
//	ARGV[5] exit code, ARGV[6] error, ARGV[7] output
//
// Returns 1 when recorded, 0 when owner does not hold the run.
var cronFinishScript = goredis.NewScript(cronLuaNow + cronLuaTrim + cronLuaFinal + `
local old = redis.call('HGET', KEYS[7], ARGV[2])
if not old then return 0 end
local rec = cjson.decode(old)
if rec.status ~= 'running' or rec.owner ~= ARGV[3] then return 0 end
local exp = tonumber(redis.call('ZSCORE', KEYS[11], ARGV[2]) or nows)
rec.status = ARGV[4]
rec.exit_code = ARGV[5]
if ARGV[6] ~= '' then rec.error = ARGV[6] end
rec.finished = nows
rec.expires = string.format('%d', exp)
local text = cjson.encode(rec)
redis.call('HSET', KEYS[7], ARGV[2], text)
if ARGV[7] ~= '' then redis.call('HSET', KEYS[8], ARGV[2], ARGV[7]) end
redis.call('ZREM', KEYS[11], ARGV[2])
redis.call('ZREM', KEYS[4], old)
redis.call('ZADD', KEYS[10], rec.fencing, ARGV[2])
if failed(ARGV[4]) then redis.call('ZADD', KEYS[5], now, text) end
trim()
return 1
`)

// cronReapScript marks a running occurrence whose lease expired as lost
// and trims the task's history; like FinishOccurrence, with the result the
// host could not give.
//
//	KEYS as for every occurrence script (see cronKeys)
//	ARGV[1] task, ARGV[2] id
//
// Returns 1 when reaped, 0 when it was not running with an expired lease.
var cronReapScript = goredis.NewScript(cronLuaNow + cronLuaTrim + `
local old = redis.call('HGET', KEYS[7], ARGV[2])
if not old then return 0 end
local rec = cjson.decode(old)
if rec.status ~= 'running' then return 0 end
local exp = tonumber(redis.call('ZSCORE', KEYS[11], ARGV[2]) or '0')
if exp > now then return 0 end
rec.status = 'lost'
rec.exit_code = '0'
rec.error = 'run lease expired: host lost'
rec.finished = nows
rec.expires = string.format('%d', exp)
local text = cjson.encode(rec)
redis.call('HSET', KEYS[7], ARGV[2], text)
redis.call('ZREM', KEYS[11], ARGV[2])
redis.call('ZREM', KEYS[4], old)
redis.call('ZADD', KEYS[10], rec.fencing, ARGV[2])
redis.call('ZADD', KEYS[5], now, text)
trim()
return 1
`)

// cronDueScript lists due tasks and the earliest future next_exec at one
// instant (read-only).
//
//	KEYS[1] the schedule, KEYS[2] the definitions
//	ARGV[1] limit (0: all)
//
// Returns {{name, def, next_exec µs, ...}, earliest future next_exec µs or
// ""}.
var cronDueScript = goredis.NewScript(cronLuaNow + `
local due
if tonumber(ARGV[1]) > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
else
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES')
end
local out = {}
for i = 1, #due, 2 do
  local def = redis.call('HGET', KEYS[2], due[i])
  if def then
    out[#out + 1] = due[i]
    out[#out + 1] = def
    out[#out + 1] = due[i + 1]
  end
end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {out, later[2] or ''}
`)

// cronExpiredScript lists running records whose lease expired, the
// longest expired first (read-only).
//
//	KEYS[1] the leases
//	ARGV[1] limit (0: all)
//
// Returns {record, expiry µs, ...}.
var cronExpiredScript = goredis.NewScript(cronLuaNow + `
if tonumber(ARGV[1]) > 0 then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES')
`)

// cronRunningScript lists a task's records whose lease is live
// (read-only).
//
//	KEYS[1] the task's records, KEYS[2] the task's running records
//
// Returns {record, expiry µs, ...}.
var cronRunningScript = goredis.NewScript(cronLuaNow + `
local run = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. nows, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #run, 2 do
  local rec = redis.call('HGET', KEYS[1], run[i])
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = run[i + 1]
  end
end
return out
`)

// cronHistoryScript lists a task's records newest first, with their
// output and, for running ones, their lease (read-only).
//
//	KEYS[1] the task's records, KEYS[2] its outputs, KEYS[3] its history,
//	KEYS[4] its running records
//	ARGV[1] limit (0: all)
//
// Returns {record, output or "", lease µs or "", ...}.
var cronHistoryScript = goredis.NewScript(`
local ids = redis.call('ZREVRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', KEYS[1], id)
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
    out[#out + 1] = redis.call('ZSCORE', KEYS[4], id) or ''
  end
end
return out
`)

// cronRecord is an occurrence record as the scripts write it.
type cronRecord struct {
	Task     string `json:"task"`
	Sched    int64  `json:"sched,string"`
	Attempt  int    `json:"attempt,string"`
	RunID    string `json:"run_id"`
	Fencing  int64  `json:"fencing,string"`
	Manual   bool   `json:"manual"`
	Owner    string `json:"owner"`
	Host     string `json:"host"`
	Status   string `json:"status"`
	Started  int64  `json:"started,string"`
	Expires  int64  `json:"expires,string"`
	Finished int64  `json:"finished,string"`
	ExitCode int    `json:"exit_code,string"`
	Error    string `json:"error"`
}

// parseCronRecord decodes a record; exp, when not "", is its run lease
// (the score that holds a running record's expiry).
func parseCronRecord(text, exp string) (cronRecord, error) {
	var r cronRecord
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return r, fmt.Errorf("occurrence record: %w", err)
	}
	if exp != "" {
		us, err := cronScore(exp)
		if err != nil {
			return r, err
		}
		r.Expires = us
	}
	return r, nil
}

func (r cronRecord) occurrence() backends.Occurrence {
	return backends.Occurrence{Task: r.Task, ScheduledAt: timeOfMicros(r.Sched), Attempt: r.Attempt, RunID: r.RunID,
		Fencing: r.Fencing, Owner: r.Owner, Host: r.Host, Manual: r.Manual,
		StartedAt: timeOfMicros(r.Started), ExpiresAt: timeOfMicros(r.Expires)}
}

func (r cronRecord) run() backends.Run {
	run := backends.Run{Occurrence: r.occurrence(),
		RunResult: backends.RunResult{Status: r.Status, ExitCode: r.ExitCode, Error: r.Error}}
	if r.Finished != 0 {
		run.FinishedAt = timeOfMicros(r.Finished)
	}
	return run
}

// cronID is an occurrence's id within its task.
func cronID(sched time.Time, attempt int) string {
	return usArg(sched.UnixMicro()) + ":" + strconv.Itoa(attempt)
}

// cronLimitArg maps a non-positive limit to the scripts' "all".
func cronLimitArg(n int) int {
	return max(n, 0)
}

// newCronRunID returns 16 random bytes in hex.
func newCronRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// DueTasks lists tasks whose next_exec is at or before the server's now,
// earliest first, up to limit (non-positive: all), and the earliest
// next_exec of the others (zero when none), from one read-only script.
func (s *Store) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	res, err := cronDueScript.RunRO(ctx, s.rdb, []string{s.keys.cronNext(), s.keys.cronDefs()}, cronLimitArg(limit)).Slice()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("due cron tasks: %w", err)
	}
	if len(res) != 2 {
		return nil, time.Time{}, fmt.Errorf("due cron tasks: script returned %d values", len(res))
	}
	flat, _ := res[0].([]any)
	var due []backends.DueTask
	for i := 0; i+2 < len(flat); i += 3 {
		name, _ := flat[i].(string)
		def, _ := flat[i+1].(string)
		score, _ := flat[i+2].(string)
		us, err := cronScore(score)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("due cron tasks: %s: %w", name, err)
		}
		due = append(due, backends.DueTask{Name: name, Def: json.RawMessage(def), NextExec: timeOfMicros(us)})
	}
	var nextAt time.Time
	if v, _ := res[1].(string); v != "" {
		us, err := cronScore(v)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("due cron tasks: %w", err)
		}
		nextAt = timeOfMicros(us)
	}
	return due, nextAt, nil
}

// ClaimOccurrence implements backends.Crons.ClaimOccurrence in one script.
func (s *Store) ClaimOccurrence(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	occ, err := s.claimCron(ctx, req)
	if err != nil {
		return backends.Occurrence{}, fmt.Errorf("claim cron %q attempt %d: %w", req.Task, req.Attempt, err)
	}
	return occ, nil
}

func (s *Store) claimCron(ctx context.Context, req backends.ClaimRequest) (backends.Occurrence, error) {
	if err := s.writable(); err != nil {
		return backends.Occurrence{}, err
	}
	switch {
	case req.Task == "":
		return backends.Occurrence{}, errors.New("empty task name")
	case req.Owner == "":
		return backends.Occurrence{}, errors.New("empty owner")
	case req.Attempt < 1:
		return backends.Occurrence{}, fmt.Errorf("attempt %d: must be at least 1", req.Attempt)
	}
	var lease int64
	if req.Skip == "" {
		var err error
		if lease, err = microsOfLease(req.Lease); err != nil {
			return backends.Occurrence{}, err
		}
	}
	mode, sched := "s", usArg(req.ScheduledAt.UnixMicro())
	switch {
	case req.Attempt > 1:
		mode = "r"
	case req.Manual:
		mode, sched = "m", ""
	}
	manual := "0"
	if req.Manual {
		manual = "1"
	}
	occ := backends.Occurrence{Task: req.Task, Attempt: req.Attempt, RunID: newCronRunID(),
		Owner: req.Owner, Host: req.Host, Manual: req.Manual}
	res, err := cronClaimScript.Run(ctx, s.rdb, s.cronKeys(req.Task), req.Task, mode, sched, cronNextArg(req.Next),
		req.Attempt, occ.RunID, req.Owner, req.Host, manual, lease, req.Skip).Slice()
	if err != nil {
		return backends.Occurrence{}, err
	}
	code, _ := res[0].(int64)
	switch code {
	case 0:
	case 1:
		return backends.Occurrence{}, backends.ErrNotFound
	case 2:
		return backends.Occurrence{}, fmt.Errorf("next_exec is no longer %s: %w", req.ScheduledAt.UTC().Format(time.RFC3339Nano), backends.ErrConflict)
	case 3:
		return backends.Occurrence{}, fmt.Errorf("occurrence already claimed: %w", backends.ErrConflict)
	case 4:
		return backends.Occurrence{}, fmt.Errorf("attempt %d has not ended unsuccessfully: %w", req.Attempt-1, backends.ErrConflict)
	case 5:
		return backends.Occurrence{}, fmt.Errorf("no free time for a manual run: %w", backends.ErrConflict)
	default:
		return backends.Occurrence{}, fmt.Errorf("claim script returned code %d", code)
	}
	if len(res) != 5 {
		return backends.Occurrence{}, fmt.Errorf("claim script returned %d values", len(res))
	}
	fencing, _ := res[1].(int64)
	at, _ := res[2].(int64)
	started, _ := res[3].(int64)
	exp, _ := res[4].(int64)
	occ.Fencing, occ.ScheduledAt = fencing, timeOfMicros(at)
	occ.StartedAt, occ.ExpiresAt = timeOfMicros(started), timeOfMicros(exp)
	return occ, nil
}

// ExtendOccurrence renews occ.Owner's run lease to the server's now +
// lease, while it is live (ErrLost otherwise).
func (s *Store) ExtendOccurrence(ctx context.Context, occ backends.Occurrence, lease time.Duration) (time.Time, error) {
	if err := s.writable(); err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q: %w", occ.Task, err)
	}
	us, err := microsOfLease(lease)
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q: %w", occ.Task, err)
	}
	exp, err := cronExtendScript.Run(ctx, s.rdb, s.cronKeys(occ.Task), occ.Task, cronID(occ.ScheduledAt, occ.Attempt), occ.Owner, us).Int64()
	if err == nil && exp == 0 {
		err = backends.ErrLost
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extend cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return timeOfMicros(exp), nil
}

// cronFinal reports whether status ends a run.
func cronFinal(status string) bool {
	switch status {
	case backends.RunSucceeded, backends.RunFailed, backends.RunTimedOut, backends.RunLost, backends.RunSkipped:
		return true
	}
	return false
}

// FinishOccurrence records res if occ.Owner still runs occ (ErrLost
// otherwise), keeping the last 64 KiB of output, and trims the task's
// finished occurrences to its history_limit, in one script.
func (s *Store) FinishOccurrence(ctx context.Context, occ backends.Occurrence, res backends.RunResult) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("finish cron %q: %w", occ.Task, err)
	}
	if !cronFinal(res.Status) {
		return fmt.Errorf("finish cron %q: status %q does not end a run", occ.Task, res.Status)
	}
	out := res.Output
	if len(out) > cronMaxOutput {
		out = out[len(out)-cronMaxOutput:]
	}
	n, err := cronFinishScript.Run(ctx, s.rdb, s.cronKeys(occ.Task), occ.Task, cronID(occ.ScheduledAt, occ.Attempt), occ.Owner,
		res.Status, res.ExitCode, res.Error, out).Int64()
	if err == nil && n == 0 {
		err = backends.ErrLost
	}
	if err != nil {
		return fmt.Errorf("finish cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return nil
}

// ExpiredOccurrences lists running occurrences whose run lease expired, the
// longest expired first, up to limit (non-positive: all).
func (s *Store) ExpiredOccurrences(ctx context.Context, limit int) ([]backends.Occurrence, error) {
	res, err := cronExpiredScript.RunRO(ctx, s.rdb, []string{s.keys.cronLeases()}, cronLimitArg(limit)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("expired cron occurrences: %w", err)
	}
	out, err := cronOccurrences(res)
	if err != nil {
		return nil, fmt.Errorf("expired cron occurrences: %w", err)
	}
	return out, nil
}

// cronOccurrences decodes {record, lease µs, ...}.
func cronOccurrences(flat []string) ([]backends.Occurrence, error) {
	var out []backends.Occurrence
	for i := 0; i+1 < len(flat); i += 2 {
		r, err := parseCronRecord(flat[i], flat[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, r.occurrence())
	}
	return out, nil
}

// ReapOccurrence marks occ lost if it is still running with an expired
// lease (ErrConflict otherwise), and trims the task's history, in one
// script.
func (s *Store) ReapOccurrence(ctx context.Context, occ backends.Occurrence) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("reap cron %q: %w", occ.Task, err)
	}
	n, err := cronReapScript.Run(ctx, s.rdb, s.cronKeys(occ.Task), occ.Task, cronID(occ.ScheduledAt, occ.Attempt)).Int64()
	if err == nil && n == 0 {
		err = fmt.Errorf("not running with an expired lease: %w", backends.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("reap cron %q attempt %d: %w", occ.Task, occ.Attempt, err)
	}
	return nil
}

// Running lists task's occurrences whose run lease is live, oldest first.
func (s *Store) Running(ctx context.Context, task string) ([]backends.Occurrence, error) {
	keys := []string{s.keys.cronTask(task, "occ"), s.keys.cronTask(task, "run")}
	res, err := cronRunningScript.RunRO(ctx, s.rdb, keys).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("running cron %q: %w", task, err)
	}
	out, err := cronOccurrences(res)
	if err != nil {
		return nil, fmt.Errorf("running cron %q: %w", task, err)
	}
	slices.SortFunc(out, func(a, b backends.Occurrence) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.Fencing, b.Fencing))
	})
	return out, nil
}

// History lists task's occurrences of any status, newest claimed first, up
// to limit (non-positive: all), with their output.
func (s *Store) History(ctx context.Context, task string, limit int) ([]backends.Run, error) {
	keys := []string{s.keys.cronTask(task, "occ"), s.keys.cronTask(task, "out"), s.keys.cronTask(task, "hist"), s.keys.cronTask(task, "run")}
	res, err := cronHistoryScript.RunRO(ctx, s.rdb, keys, cronLimitArg(limit)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("cron history %q: %w", task, err)
	}
	var out []backends.Run
	for i := 0; i+2 < len(res); i += 3 {
		r, err := parseCronRecord(res[i], res[i+2])
		if err != nil {
			return nil, fmt.Errorf("cron history %q: %w", task, err)
		}
		run := r.run()
		if res[i+1] != "" {
			run.Output = []byte(res[i+1])
		}
		out = append(out, run)
	}
	return out, nil
}

// PendingRetries lists the latest attempt of each (task, scheduled_at) that
// ended failed, timeout or lost and has no higher attempt, earliest finished
// first, up to limit (non-positive: all), without output: one ZRANGE of
// the index the finish, reap, claim and trim scripts keep.
func (s *Store) PendingRetries(ctx context.Context, limit int) ([]backends.Run, error) {
	stop := int64(limit) - 1
	if limit <= 0 {
		stop = -1
	}
	res, err := s.rdb.ZRange(ctx, s.keys.cronRetries(), 0, stop).Result()
	if err != nil {
		return nil, fmt.Errorf("pending cron retries: %w", err)
	}
	out := make([]backends.Run, 0, len(res))
	for _, text := range res {
		r, err := parseCronRecord(text, "")
		if err != nil {
			return nil, fmt.Errorf("pending cron retries: %w", err)
		}
		out = append(out, r.run())
	}
	return out, nil
}
