package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/coordd/coordd/backends"
)

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
// order (cronKeys builds them; the batch scripts, which claim or finish
// occurrences of many tasks at once, take the first six and then each
// occurrence's task keys in turn):
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
// and ARGV[1] is the task's name.
func (s *Store) cronKeys(task string) []string {
	k := s.keys
	return []string{k.cronNext(), k.cronDefs(), k.cronFencing(), k.cronLeases(), k.cronRetries(), k.cronLimits(),
		k.cronTask(task, "occ"), k.cronTask(task, "out"), k.cronTask(task, "hist"), k.cronTask(task, "done"), k.cronTask(task, "run")}
}

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

// DueTasks lists tasks whose next_exec is at or before the server's now,
// earliest first, up to limit (non-positive: all), and the earliest
// next_exec of the others (zero when none), from one read-only script.
func (s *Store) DueTasks(ctx context.Context, limit int) ([]backends.DueTask, time.Time, error) {
	res, err := cronDueScript.RunRO(ctx, s.rdb, []string{s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronPaused()}, cronLimitArg(limit)).Slice()
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
	err := s.writable()
	if err == nil {
		err = backends.CheckClaim(req)
	}
	if err != nil {
		return backends.Occurrence{}, backends.ClaimError(req, err)
	}
	res, err := s.claimCrons(ctx, []backends.ClaimRequest{req})
	if err != nil {
		return backends.Occurrence{}, err
	}
	return res[0].Occurrence, res[0].Err
}

// ClaimOccurrences implements backends.Crons.ClaimOccurrences in one
// script, which makes the claims one after another.
func (s *Store) ClaimOccurrences(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	if err := s.writable(); err != nil {
		return nil, backends.ClaimsError(len(reqs), err)
	}
	return backends.ClaimBatch(reqs, func(batch []backends.ClaimRequest) ([]backends.ClaimResult, error) {
		return s.claimCrons(ctx, batch)
	})
}

// claimCrons runs cronClaimScript for checked requests (backends.CheckClaim).
func (s *Store) claimCrons(ctx context.Context, reqs []backends.ClaimRequest) ([]backends.ClaimResult, error) {
	keys := []string{s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronFencing(), s.keys.cronLeases(), s.keys.cronRetries(), s.keys.cronLimits(),
		s.keys.cronPaused()}
	args := make([]any, 0, 12*len(reqs))
	runIDs := make([]string, len(reqs))
	for i, req := range reqs {
		var lease int64
		if req.Skip == "" {
			lease = req.Lease.Microseconds()
		}
		mode, sched := "s", usArg(req.ScheduledAt.UnixMicro())
		switch {
		case req.Attempt > 1:
			mode = "r"
		case req.Manual:
			mode, sched = "m", ""
		}
		runIDs[i] = backends.NewCronRunID()
		keys = append(keys, s.keys.cronTask(req.Task, "occ"), s.keys.cronTask(req.Task, "out"), s.keys.cronTask(req.Task, "hist"),
			s.keys.cronTask(req.Task, "done"), s.keys.cronTask(req.Task, "run"))
		args = append(args, req.Task, mode, sched, cronNextArg(req.Next), req.Attempt, runIDs[i], req.Owner, req.Host,
			flag(req.Manual), lease, req.Skip, flag(req.Exclusive))
	}
	res, err := cronClaimScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("script returned %d replies for %d claims", len(res), len(reqs))
	}
	if err != nil {
		return nil, backends.ClaimsError(len(reqs), err)
	}
	out := make([]backends.ClaimResult, len(reqs))
	for i, req := range reqs {
		occ, err := claimReply(req, res[i])
		if err != nil {
			out[i].Err = backends.ClaimError(req, err)
			continue
		}
		occ.RunID = runIDs[i]
		out[i].Occurrence = occ
	}
	return out, nil
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// claimReply decodes one claim's reply of cronClaimScript.
func claimReply(req backends.ClaimRequest, reply any) (backends.Occurrence, error) {
	res, _ := reply.([]any)
	if len(res) == 0 {
		return backends.Occurrence{}, fmt.Errorf("claim script returned %v", reply)
	}
	// The script's codes are backends.ClaimRefusal values.
	if code, _ := res[0].(int64); code != 0 {
		return backends.Occurrence{}, backends.ClaimRefusal(code).Err(req)
	}
	if len(res) != 5 {
		return backends.Occurrence{}, fmt.Errorf("claim script returned %d values", len(res))
	}
	fencing, _ := res[1].(int64)
	at, _ := res[2].(int64)
	started, _ := res[3].(int64)
	exp, _ := res[4].(int64)
	return backends.Occurrence{Task: req.Task, Attempt: req.Attempt, Owner: req.Owner, Host: req.Host, Manual: req.Manual,
		Fencing: fencing, ScheduledAt: timeOfMicros(at), StartedAt: timeOfMicros(started), ExpiresAt: timeOfMicros(exp)}, nil
}

// ExtendOccurrences implements backends.Crons.ExtendOccurrences in one
// script.
func (s *Store) ExtendOccurrences(ctx context.Context, exts []backends.Extension) ([]backends.ExtendResult, error) {
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(exts), err)
	}
	out := make([]backends.ExtendResult, len(exts))
	keys := []string{s.keys.cronLeases()}
	var args []any
	var sent []int
	for i, e := range exts {
		if out[i].Err = backends.CheckExtension(e); out[i].Err != nil {
			continue
		}
		o := e.Occurrence
		keys = append(keys, s.keys.cronTask(o.Task, "occ"), s.keys.cronTask(o.Task, "run"))
		args = append(args, cronID(o.ScheduledAt, o.Attempt), o.Owner, e.Lease.Microseconds())
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	res, err := cronExtendManyScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err == nil && len(res) != len(sent) {
		err = fmt.Errorf("script returned %d replies for %d extensions", len(res), len(sent))
	}
	if err != nil {
		return nil, fmt.Errorf("extend %d cron occurrences: %w", len(sent), err)
	}
	for j, i := range sent {
		if res[j] == 0 {
			out[i].Err = backends.OccurrenceError("extend", exts[i].Occurrence, backends.ErrLost)
			continue
		}
		out[i].ExpiresAt = timeOfMicros(res[j])
	}
	return out, nil
}

// FinishOccurrences implements backends.Crons.FinishOccurrences in one
// script.
func (s *Store) FinishOccurrences(ctx context.Context, fins []backends.Finish) ([]error, error) {
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("finish %d cron occurrences: %w", len(fins), err)
	}
	out := make([]error, len(fins))
	keys := []string{s.keys.cronNext(), s.keys.cronDefs(), s.keys.cronFencing(), s.keys.cronLeases(), s.keys.cronRetries(), s.keys.cronLimits()}
	var args []any
	var sent []int
	for i, f := range fins {
		if out[i] = backends.CheckFinish(f); out[i] != nil {
			continue
		}
		occ, res := f.Occurrence, f.Result
		o := backends.OutputTail(res.Output)
		keys = append(keys, s.keys.cronTask(occ.Task, "occ"), s.keys.cronTask(occ.Task, "out"), s.keys.cronTask(occ.Task, "hist"),
			s.keys.cronTask(occ.Task, "done"), s.keys.cronTask(occ.Task, "run"))
		args = append(args, occ.Task, cronID(occ.ScheduledAt, occ.Attempt), occ.Owner, res.Status, res.ExitCode, res.Error, o)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, nil
	}
	res, err := cronFinishScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err == nil && len(res) != len(sent) {
		err = fmt.Errorf("script returned %d replies for %d finishes", len(res), len(sent))
	}
	if err != nil {
		return nil, fmt.Errorf("finish %d cron occurrences: %w", len(sent), err)
	}
	for j, i := range sent {
		if res[j] == 0 {
			out[i] = backends.OccurrenceError("finish", fins[i].Occurrence, backends.ErrLost)
		}
	}
	return out, nil
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
		err = backends.ErrNotExpired
	}
	if err != nil {
		return backends.OccurrenceError("reap", occ, err)
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
