package redis

import (
	"context"
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
