package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/coordd/coordd/backends"
)

// queueRequeueDeadJobScript makes one dead job ready again
// (RequeueDeadJob), as queueRequeueDeadScript does to each dead job.
//
// KEYS: the fixed keys, then the ready sets of all partitions.
// ARGV[1]: the job id.
// It returns {1} when it requeued the job, {0} when the queue is absent
// or the job is not in its dead list, {-1, P} when it got too few ready
// sets.
var queueRequeueDeadJobScript = queueScript(`
local m = redis.call('HMGET', K_META, 'partitions')
if not m[1] then return {0} end
local P = tonumber(m[1])
if NLISTS ~= P then return {-1, P} end
local id = ARGV[1]
local rec = redis.call('HGET', K_JOBS, id)
if not rec or redis.call('LREM', K_DEAD, 1, id) == 0 then return {0} end
local j = decode(rec)
j.attempt, j.avail, j.owner, j.part = 0, now_us(), '', j.part % P
redis.call('HSET', K_JOBS, id, encode(j))
redis.call('ZADD', ready_key(j.part), id, id)
if j.key ~= '' then redis.call('ZADD', K_KREADY, 0, kmember(j.key, id)) end
wake(1)
return {1}
`)

// queuePurgeDeadJobScript deletes one dead job (PurgeDeadJob).
//
// KEYS: the fixed keys.
// ARGV[1]: the job id.
// It returns {1} when it deleted the job, {0} when the job is not in the
// queue's dead list.
var queuePurgeDeadJobScript = queueScript(`
local id = ARGV[1]
if redis.call('LREM', K_DEAD, 1, id) == 0 then return {0} end
redis.call('HDEL', K_JOBS, id)
redis.call('HDEL', K_PAYLOADS, id)
return {1}
`)

// RequeueDeadJob makes dead job id of queue ready again (backends.DeadJobs).
func (s *Store) RequeueDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.runQueueScript(ctx, queueRequeueDeadJobScript, queue, queueArgs(strconv.FormatInt(id, 10)))
	return backends.DeadJobOutcome("requeue", queue, id, deadJobsDone(res), err)
}

// PurgeDeadJob deletes dead job id of queue (backends.DeadJobs).
func (s *Store) PurgeDeadJob(ctx context.Context, queue string, id int64) error {
	if err := s.writable(); err != nil {
		return err
	}
	res, err := s.queueEval(ctx, queuePurgeDeadJobScript, s.queueInfo(queue).fixed, strconv.FormatInt(id, 10))
	return backends.DeadJobOutcome("purge", queue, id, deadJobsDone(res), err)
}

// deadJobsDone reads a dead job script's reply: {1} done (1 job), {0} no
// such job.
func deadJobsDone(res []any) int64 {
	if len(res) == 0 || queueInt(res[0]) != 1 {
		return 0
	}
	return 1
}

// queuePartialJob is what the dead job readers return for one job: the
// fields of queueJobFields with the last error and the payload cut at
// ARGV's cut, then the payload's whole length. Redis has no range read of
// a hash field, so the script reads the payload and cuts it on the server:
// the whole payload never crosses the network.
const queuePartialPrelude = `
local function partial(out, id, rec, cut)
  local j = decode(rec)
  local size = redis.call('HSTRLEN', K_PAYLOADS, id)
  local pay = ''
  if cut > 0 and size > 0 then pay = string.sub(redis.call('HGET', K_PAYLOADS, id) or '', 1, cut) end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8], out[n + 9] =
    tonumber(id), j.part, j.attempt, j.enq, j.avail, j.key, string.sub(j.err or '', 1, cut), pay, size
end
`

// queuePartialFields is the number of fields queuePartialPrelude's
// partial returns per job.
const queuePartialFields = queueJobFields + 1

// queueDeadPageScript lists a page of dead jobs (DeadPage). It writes
// nothing.
//
// KEYS: the fixed keys.
// ARGV: offset, limit, cut.
// It returns the fields of queuePartialFields for each, in the dead list's
// order (Dead's).
var queueDeadPageScript = queueScript(queuePartialPrelude + `
local off, lim, cut = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
if lim <= 0 then return out end
for _, id in ipairs(redis.call('LRANGE', K_DEAD, off, off + lim - 1)) do
  local rec = redis.call('HGET', K_JOBS, id)
  if rec then partial(out, id, rec, cut) end
end
return out
`)

// queueDeadOneScript reads one dead job (DeadJob). It writes nothing.
//
// KEYS: the fixed keys.
// ARGV: the job id, cut.
// It returns the fields of queuePartialFields, or {} when the job is not
// in the queue's dead list.
var queueDeadOneScript = queueScript(queuePartialPrelude + `
local id, cut = ARGV[1], tonumber(ARGV[2])
local out = {}
local rec = redis.call('HGET', K_JOBS, id)
if not rec or not redis.call('LPOS', K_DEAD, id) then return out end
partial(out, id, rec, cut)
return out
`)

// DeadPage lists up to limit dead jobs of queue after the first offset,
// in the order they died, payload and last error cut at cut bytes
// (backends.DeadJobReader).
func (s *Store) DeadPage(ctx context.Context, queue string, offset, limit, cut int) ([]backends.PartialJob, error) {
	res, err := s.queueEval(ctx, queueDeadPageScript, s.queueInfo(queue).fixed, max(offset, 0), max(limit, 0), max(cut, 0))
	if err != nil {
		return nil, fmt.Errorf("list dead jobs of queue %q: %w", queue, err)
	}
	jobs := make([]backends.PartialJob, 0, len(res)/queuePartialFields)
	for i := 0; i+queuePartialFields <= len(res); i += queuePartialFields {
		jobs = append(jobs, backends.PartialJob{Job: queueJobAt(queue, res, i), PayloadSize: queueInt(res[i+queueJobFields])})
	}
	return jobs, nil
}

// DeadJob reads dead job id of queue, payload and last error cut at cut
// bytes (backends.DeadJobReader).
func (s *Store) DeadJob(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, error) {
	res, err := s.queueEval(ctx, queueDeadOneScript, s.queueInfo(queue).fixed, strconv.FormatInt(id, 10), max(cut, 0))
	switch {
	case err != nil:
		return backends.PartialJob{}, fmt.Errorf("read dead job %d of queue %q: %w", id, queue, err)
	case len(res) < queuePartialFields:
		return backends.PartialJob{}, fmt.Errorf("queue %q has no dead job %d: %w", queue, id, backends.ErrNotFound)
	}
	return backends.PartialJob{Job: queueJobAt(queue, res, 0), PayloadSize: queueInt(res[queueJobFields])}, nil
}
