#!/usr/bin/env bash
# Coalescing per key: one runs, one waits, the rest are dropped, per catalogue. Run
# from anywhere:
#
#   examples/coalesce/run.sh         # embedded SQLite store, no setup
#   examples/coalesce/run.sh redis   # Redis at $COORDD_REDIS_URL (default redis://127.0.0.1:6379/0)
#
# It needs `coordd` on PATH (or bin/coordd from `make build`). State goes to
# $COORDD_DATA_DIR, a new temp dir (removed at exit) when unset. It checks what it shows and
# ends with "OK".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/${1:-}
command -v coordd >/dev/null || PATH=$here/../../bin:$PATH
own_dir=
if [ -z "${COORDD_DATA_DIR:-}" ]; then
  COORDD_DATA_DIR=$(mktemp -d) own_dir=1 # a temp dir of our own goes when the script ends
fi
export COORDD_DATA_DIR
# On Redis the example's keys (under its key prefix) go when it ends too.
redis_url=${COORDD_REDIS_URL:-redis://127.0.0.1:6379/0} redis_prefix=${COORDD_REDIS_PREFIX:-coordd-coalesce:}
cleanup() {
  if [ -n "$own_dir" ]; then rm -rf "$COORDD_DATA_DIR"; fi
  if [ "${1:-}" = redis ]; then
    if command -v redis-cli >/dev/null; then
      redis-cli -u "$redis_url" --scan --pattern "${redis_prefix}*" | xargs -r redis-cli -u "$redis_url" del >/dev/null
    else
      echo "note: the keys under ${redis_prefix} stay in Redis (no redis-cli to remove them)" >&2
    fi
  fi
}
trap 'cleanup "${1:-}"' EXIT
export REINDEX_LOG=$COORDD_DATA_DIR/reindex.log REINDEX_HOLD=$COORDD_DATA_DIR/hold
: >"$REINDEX_LOG"
touch "$REINDEX_HOLD"
cd "$here"
fail() { echo "FAILED: $*" >&2; exit 1; }
wait_for() { for _ in $(seq 200); do "$@" && return 0; sleep 0.1; done; fail "timed out waiting for: $*"; }
# state KEY HOLDERS WAITERS: the instance of KEY has that many of each.
state() { coordd sem status reindex --key "$1" -f "$spec" | grep -q "holders $2  *waiters $3\$"; }
trigger() { coordd sem run reindex --key "$1" -f "$spec" --wait 1h -- ./reindex.sh "$2"; }

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== catalogue-a: trigger 1 runs"
trigger catalogue-a 1 &
t1=$!
wait_for state catalogue-a 1 0
echo "== catalogue-a: trigger 2 waits"
trigger catalogue-a 2 &
t2=$!
wait_for state catalogue-a 1 1
coordd sem status reindex -f "$spec"

echo "== catalogue-a: triggers 3 to 5 find its line full and are dropped at once: exit 75"
for i in 3 4 5; do
  rc=0
  trigger catalogue-a "$i" || rc=$?
  [ "$rc" -eq 75 ] || fail "trigger $i: exit $rc, want 75"
done

echo "== catalogue-b: its own instance, so trigger 1 runs at once (and ends)"
REINDEX_HOLD= trigger catalogue-b 1 || fail "catalogue-b trigger 1 exited $?"

echo "== catalogue-a: trigger 1 finishes; trigger 2 runs"
rm "$REINDEX_HOLD"
wait "$t1" || fail "trigger 1 exited $?"
wait "$t2" || fail "trigger 2 exited $?"
ran=$(tr '\n' ' ' <"$REINDEX_LOG")
echo "ran: $ran"
[ "$ran" = "catalogue-a 1 catalogue-b 1 catalogue-a 2 " ] || fail "ran \"$ran\", want \"catalogue-a 1 catalogue-b 1 catalogue-a 2 \""

echo "== nothing is left of either catalogue's instance"
coordd sem status reindex -f "$spec"
coordd sem status reindex -f "$spec" | grep -q "(keyed, 0 instances)" || fail "instances left behind"
echo OK
