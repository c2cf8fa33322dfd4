// Package redis is the Redis backend of coordd: token-list semaphores,
// the cron schedule, queues, the leader lease and the applied state, each
// moved only inside Lua scripts that run atomically on the server.
package redis
