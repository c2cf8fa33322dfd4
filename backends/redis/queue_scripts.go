package redis

import "github.com/coordd/coordd/spec"

// The queue scripts (lua/queue_*.lua). Every job moves only inside one of
// them. Each includes lua/lib/queue.lua, which lists their KEYS and what
// they share.

// queuePutScript creates or updates a queue (PutQueue; lua/queue_put.lua).
var queuePutScript = luaScript("queue_put.lua")

// queueDeleteScript removes a queue (DeleteQueue; lua/queue_delete.lua).
var queueDeleteScript = luaScript("queue_delete.lua")

// queueObserveScript reads one queue (ObserveQueues;
// lua/queue_observe.lua).
var queueObserveScript = luaScript("queue_observe.lua")

// queuePushScript enqueues a batch of jobs (Push; lua/queue_push.lua).
var queuePushScript = luaScript("queue_push.lua")

// queueClaimScript sweeps and claims (Claim, and WaitQueue's look;
// lua/queue_claim.lua).
var queueClaimScript = luaScript("queue_claim.lua")

// queueAckScript deletes finished jobs (Ack, a batch of one queue;
// lua/queue_ack.lua).
var queueAckScript = luaScript("queue_ack.lua")

// queueRetryScript returns a failed job to the queue or the dead list
// (Retry; lua/queue_retry.lua).
var queueRetryScript = luaScript("queue_retry.lua")

// queueExtendScript renews a lease (ExtendJob; lua/queue_extend.lua).
var queueExtendScript = luaScript("queue_extend.lua")

// queueDeadScript lists dead jobs (Dead; lua/queue_dead.lua).
var queueDeadScript = luaScript("queue_dead.lua")

// queueRequeueDeadScript makes every dead job ready again (RequeueDead;
// lua/queue_requeue_dead.lua).
var queueRequeueDeadScript = luaScript("queue_requeue_dead.lua")

// queuePurgeDeadScript deletes every dead job (PurgeDead;
// lua/queue_purge_dead.lua).
var queuePurgeDeadScript = luaScript("queue_purge_dead.lua")

// queueJobFields is the number of fields a script returns per job: id,
// partition, attempt, enqueued_at µs, available_at µs, key, last_error,
// priority, payload.
const queueJobFields = 9

// queuePrioStep and queueIDLimit are lib/queue.lua's PRIO_STEP and
// ID_LIMIT: a ready set scores a job id - priority * queuePrioStep, exact
// in a double while the id is below queueIDLimit (the push script refuses
// ids from there on).
const (
	queuePrioStep = 1 << 45
	queueIDLimit  = 1<<53 + spec.MinPriority*queuePrioStep
)
