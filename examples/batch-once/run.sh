#!/usr/bin/env bash
# A batch job that never runs twice at once. Run from anywhere:
#
#   examples/batch-once/run.sh            # embedded SQLite store, no setup
#   examples/batch-once/run.sh mysql      # MySQL/MariaDB (mode: session, GET_LOCK)
#   examples/batch-once/run.sh memcached  # memcached (an incr/decr counter mutex's store)
#
# It needs `coordd` on PATH (or bin/coordd from `make build`). State goes to
# $COORDD_DATA_DIR, a new temp dir (removed at exit) when unset. It checks what it shows and
# ends with "OK".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/${1:-}
command -v coordd >/dev/null || PATH=$here/../../bin:$PATH
if [ -z "${COORDD_DATA_DIR:-}" ]; then
  COORDD_DATA_DIR=$(mktemp -d)
  trap 'rm -rf "$COORDD_DATA_DIR"' EXIT # a temp dir of our own goes when the script ends
fi
export COORDD_DATA_DIR
cd "$here"
fail() { echo "FAILED: $*" >&2; exit 1; }
wait_for() { for _ in $(seq 200); do "$@" && return 0; sleep 0.1; done; fail "timed out waiting for: $*"; }
holders() { coordd sem status batch -f "$spec" | grep -q "holders $1 "; }

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== the first copy takes the only slot and runs for 2 s"
coordd sem run batch -f "$spec" -- ./batch.sh first &
first=$!
wait_for holders 1
coordd sem status batch -f "$spec"

echo "== a second copy with --no-wait gives up at once: exit 75"
rc=0
coordd sem run batch -f "$spec" --no-wait -- ./batch.sh second || rc=$?
[ "$rc" -eq 75 ] || fail "second copy: exit $rc, want 75"

echo "== a third copy waits (up to a minute) and runs once the first is done"
coordd sem run batch -f "$spec" --wait 1m -- ./batch.sh third
if kill -0 "$first" 2>/dev/null; then fail "the third copy ran while the first still held the slot"; fi
wait "$first" || fail "first copy: exit $?"
holders 0 || fail "the slot is still held"
echo OK
