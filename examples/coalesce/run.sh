#!/usr/bin/env bash
# Seed 003: one runs, one waits, the rest are dropped. Run from anywhere:
#
#   examples/coalesce/run.sh         # embedded SQLite store, no setup
#   examples/coalesce/run.sh redis   # Redis at $COORDD_REDIS_URL (default redis://127.0.0.1:6379/0)
#
# It needs `coordd` on PATH (or bin/coordd from `make build`). State goes to
# $COORDD_DATA_DIR, a new temp dir when unset. It checks what it shows and
# ends with "OK".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/${1:-}
command -v coordd >/dev/null || PATH=$here/../../bin:$PATH
export COORDD_DATA_DIR=${COORDD_DATA_DIR:-$(mktemp -d)}
export REINDEX_LOG=$COORDD_DATA_DIR/reindex.log REINDEX_HOLD=$COORDD_DATA_DIR/hold
: >"$REINDEX_LOG"
touch "$REINDEX_HOLD"
cd "$here"
fail() { echo "FAILED: $*" >&2; exit 1; }
wait_for() { for _ in $(seq 200); do "$@" && return 0; sleep 0.1; done; fail "timed out waiting for: $*"; }
state() { coordd sem status reindex -f "$spec" | grep -q "holders $1  *waiters $2\$"; }

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== trigger 1 runs"
coordd sem run reindex -f "$spec" --wait 1h -- ./reindex.sh 1 &
t1=$!
wait_for state 1 0
echo "== trigger 2 waits"
coordd sem run reindex -f "$spec" --wait 1h -- ./reindex.sh 2 &
t2=$!
wait_for state 1 1
coordd sem status reindex -f "$spec"

echo "== triggers 3 to 5 find the line full and are dropped at once: exit 75"
for i in 3 4 5; do
  rc=0
  coordd sem run reindex -f "$spec" --wait 1h -- ./reindex.sh "$i" || rc=$?
  [ "$rc" -eq 75 ] || fail "trigger $i: exit $rc, want 75"
done

echo "== trigger 1 finishes; trigger 2 runs"
rm "$REINDEX_HOLD"
wait "$t1" || fail "trigger 1 exited $?"
wait "$t2" || fail "trigger 2 exited $?"
ran=$(tr '\n' ' ' <"$REINDEX_LOG")
echo "ran: $ran"
[ "$ran" = "1 2 " ] || fail "ran \"$ran\", want \"1 2 \""
echo OK
