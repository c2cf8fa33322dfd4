package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

var _ backends.CronAdmin = (*Store)(nil)

// Cron keys. Every one carries the {global} hash tag: the claim script
// moves a task's next_exec in the schedule shared by all tasks and writes
// the task's occurrence in the same atomic step, so on a Redis Cluster they
// must share a slot. Definitions, history limits and fencing counters are
// fields of hashes shared by all tasks (not a hash per task) so that
// DueTasks and ObserveCrons read many tasks in one script whose keys are
// all declared.
func (k keys) cronNext() string    { return k.global("cron:next") }
func (k keys) cronDefs() string    { return k.global("cron:defs") }
func (k keys) cronLimits() string  { return k.global("cron:history-limits") }
func (k keys) cronFencing() string { return k.global("cron:fencing") }
func (k keys) cronLeases() string  { return k.global("cron:leases") }
func (k keys) cronRetries() string { return k.global("cron:retries") }
func (k keys) cronPaused() string  { return k.global("cron:paused") }

// cronTask is one of a task's own keys: occ (its occurrence records), out
// (their output), hist (all its occurrences), done (its finished ones) and
// run (its running ones).
func (k keys) cronTask(name, part string) string {
	return k.global("cron:task:" + encodeName(name) + ":" + part)
}

// cronObserveChunk is how many tasks one ObserveCrons script reads (each
// is one key of the script).
const cronObserveChunk = 500

// cronDefaultHistory is the history_limit of a task whose definition has
// none (or is absent), as in the SQL stores.
const cronDefaultHistory = 100

// cronPutScript stores a task's definition and history limit. A new task
// gets next_exec as given; an existing one keeps its next_exec unless
// resetNext, so a definition-only change never moves or repeats a run.
//
//	KEYS[1] the schedule (zset: name -> next_exec µs)
//	KEYS[2] the definitions (hash: name -> def JSON)
//	KEYS[3] the history limits (hash: name -> limit)
//	ARGV[1] name, ARGV[2] def, ARGV[3] next_exec µs ("" for none)
//	ARGV[4] resetNext ("1" or "0"), ARGV[5] history limit
//
// Returns 1.
var cronPutScript = goredis.NewScript(`
local new = redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
if new or ARGV[4] == '1' then
  if ARGV[3] == '' then
    redis.call('ZREM', KEYS[1], ARGV[1])
  else
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  end
end
return 1
`)

// cronDeleteScript removes a task: its schedule entry, definition, history
// limit and fencing counter (a task created again starts its counter at
// the server's TIME, above any number handed out before). Its occurrences
// keep their records and finish.
//
//	KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the history
//	limits, KEYS[4] the fencing counters (hash: name -> last number),
//	KEYS[5] the operators' pauses (hash: name -> pause JSON)
//	ARGV[1] name
//
// Returns 1.
var cronDeleteScript = goredis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
`)

// cronObserveScript reads many tasks at one instant (read-only).
//
//	KEYS[1] the schedule, KEYS[2] the definitions, KEYS[3] the operators'
//	pauses
//	KEYS[3+i] task i's running set (zset: id -> run lease expiry µs)
//	ARGV[i] task i's name
//
// Returns, for each task, {def or "", next_exec µs or "", running, pause
// JSON or ""}: def is "" when the task is absent, running counts unexpired
// run leases.
var cronObserveScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local out = {}
for i, name in ipairs(ARGV) do
  local def = redis.call('HGET', KEYS[2], name)
  if def then
    out[#out + 1] = def
    out[#out + 1] = redis.call('ZSCORE', KEYS[1], name) or ''
    out[#out + 1] = redis.call('ZCOUNT', KEYS[3 + i], '(' .. now, '+inf')
    out[#out + 1] = redis.call('HGET', KEYS[3], name) or ''
  else
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
end
return out
`)

// cronHistoryLimit is the history_limit of a definition as the SQL stores
// read it: an integer (in int64) clamped at 0, else the default.
func cronHistoryLimit(def json.RawMessage) int64 {
	var d struct {
		HistoryLimit json.RawMessage `json:"history_limit"`
	}
	if json.Unmarshal(def, &d) != nil {
		return cronDefaultHistory
	}
	n, err := strconv.ParseInt(string(d.HistoryLimit), 10, 64)
	if err != nil {
		return cronDefaultHistory
	}
	return max(0, n)
}

// cronScore parses a sorted-set score holding microseconds.
func cronScore(v string) (int64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("score %q: %w", v, err)
	}
	return int64(math.Round(f)), nil
}

// cronNextArg is next_exec as a script argument: "" for none.
func cronNextArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return usArg(t.UnixMicro())
}

// PutCron stores the definition and, when resetNext (or the task is new),
// next_exec. A zero next means no next occurrence.
func (s *Store) PutCron(ctx context.Context, name string, def json.RawMessage, next time.Time, resetNext bool) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("put cron %q: %w", name, err)
	}
	if name == "" {
		return errors.New("put cron: empty name")
	}
	if !json.Valid(def) {
		return fmt.Errorf("put cron %q: definition is not valid JSON", name)
	}
	reset := "0"
	if resetNext {
		reset = "1"
	}
	keys := []string{s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronLimits()}
	err := cronPutScript.Run(ctx, s.rdb, keys, name, string(def), cronNextArg(next), reset, cronHistoryLimit(def)).Err()
	if err != nil {
		return fmt.Errorf("put cron %q: %w", name, err)
	}
	return nil
}

// DeleteCron removes the task; absent is not an error.
func (s *Store) DeleteCron(ctx context.Context, name string) error {
	if err := s.writable(); err != nil {
		return fmt.Errorf("delete cron %q: %w", name, err)
	}
	keys := []string{s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronLimits(), s.keys.cronFencing(), s.keys.cronPaused()}
	if err := cronDeleteScript.Run(ctx, s.rdb, keys, name).Err(); err != nil {
		return fmt.Errorf("delete cron %q: %w", name, err)
	}
	return nil
}

// ObserveCrons reads many tasks, cronObserveChunk per read-only script
// (one round trip each).
func (s *Store) ObserveCrons(ctx context.Context, names []string) (map[string]*backends.CronState, error) {
	out := make(map[string]*backends.CronState, len(names))
	for start := 0; start < len(names); start += cronObserveChunk {
		chunk := names[start:min(start+cronObserveChunk, len(names))]
		keys := make([]string, 0, 3+len(chunk))
		keys = append(keys, s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronPaused())
		args := make([]any, 0, len(chunk))
		for _, n := range chunk {
			keys = append(keys, s.keys.cronTask(n, "run"))
			args = append(args, n)
		}
		res, err := cronObserveScript.RunRO(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("observe crons: %w", err)
		}
		if len(res) != 4*len(chunk) {
			return nil, fmt.Errorf("observe crons: script returned %d values for %d tasks", len(res), len(chunk))
		}
		for i, n := range chunk {
			def, _ := res[4*i].(string)
			if def == "" {
				continue
			}
			st := &backends.CronState{Name: n, Def: json.RawMessage(def)}
			if v, _ := res[4*i+3].(string); v != "" {
				p, err := parseCronPause(v)
				if err != nil {
					return nil, fmt.Errorf("observe crons: %s: %w", n, err)
				}
				st.Paused = &p
			}
			if v, _ := res[4*i+1].(string); v != "" {
				us, err := cronScore(v)
				if err != nil {
					return nil, fmt.Errorf("observe crons: %s: %w", n, err)
				}
				st.NextExec = timeOfMicros(us)
			}
			running, _ := res[4*i+2].(int64)
			st.Running = int(running)
			out[n] = st
		}
	}
	return out, nil
}
