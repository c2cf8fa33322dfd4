// Package peers measures coordd against the libraries a Go user would pick
// instead, side by side in one run on the same servers:
//
//	make bench-peers
//
// It is a module of its own so that the peers (bsm/redislock,
// go-redsync, asynq, go-redis/redis_rate, goqite, River) never become
// dependencies of coordd. Every row
// runs the peer and coordd alternately, in chunks, so that both see the
// same machine load; the table prints each side's rate and their ratio.
// Peers run with their documented defaults, and at their fastest
// documented setup where it differs, with no-op handlers; coordd runs
// with the defaults of its spec and Go API. Redis rows use a private
// redis-server (asynq's keys have no prefix of ours), MariaDB rows a
// database of their own, PostgreSQL rows a database made for the run
// (River and coordd in a schema each), SQLite rows temp files.
package peers
