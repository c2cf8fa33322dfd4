package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/coordd/coordd/backends"
)

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

// cronPutScript stores a task's definition and history limit
// (lua/cron_put.lua).
var cronPutScript = luaScript("cron_put.lua")

// cronSetNextScript sets a task's next_exec if it holds a given time
// (lua/cron_set_next.lua).
var cronSetNextScript = luaScript("cron_set_next.lua")

// cronDeleteScript removes a task (lua/cron_delete.lua).
var cronDeleteScript = luaScript("cron_delete.lua")

// cronObserveScript reads many tasks at one instant (read-only;
// lua/cron_observe.lua).
var cronObserveScript = luaScript("cron_observe.lua")

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

// SetNextExec sets next_exec to to if it holds from (zero: none).
func (s *Store) SetNextExec(ctx context.Context, name string, from, to time.Time) (bool, error) {
	if err := s.writable(); err != nil {
		return false, fmt.Errorf("set next_exec of cron %q: %w", name, err)
	}
	if err := backends.CheckSetNextExec(name, from, to); err != nil {
		return false, err
	}
	keys := []string{s.keys.cronNext(), s.keys.cronDefs()}
	n, err := cronSetNextScript.Run(ctx, s.rdb, keys, name, cronNextArg(from), cronNextArg(to)).Int()
	if err != nil {
		return false, fmt.Errorf("set next_exec of cron %q: %w", name, err)
	}
	return n == 1, nil
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
