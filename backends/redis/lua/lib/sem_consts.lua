-- lib/sem_consts.lua: the constants every semaphore script shares.
--
-- SENTINEL is the last element of the free list (see lib/sem_keys.lua).
-- WAKE_TTL_MS is how long a waiter's own wake list outlives its last push
-- (a waiter that died before it read it).
--
-- The one-slot mode's (see semaphore_scripts.go):
-- BIAS is 2^52: an armed counter c stands for c + 2^52, so it stays
-- negative (fencing numbers start at TIME in µs, 2^52 µs is the year 2112)
-- and exact in Lua's doubles. sem_fast_acquire.lua and raise_counter.lua
-- write it out.
-- GRACE_MS is how long a lock outlives its lease, keeping the record of an
-- expired holder (ms): semLockGrace in semaphore.go, which a test checks.
-- sem_fast_release.lua writes it out.
-- LOCK_SENT_EXP and LOCK_SENT_REC are slot 0 in exp and holders while the
-- lock holds the slot: a holder that never expires, for binaries from
-- before the lock.
local SENTINEL = '#'
local WAKE_TTL_MS = 300000
local BIAS = 4503599627370496
local GRACE_MS = 3600000
local LOCK_SENT_EXP = '9000000000000000'
local LOCK_SENT_REC = '0 0 0 8 (inline)'
