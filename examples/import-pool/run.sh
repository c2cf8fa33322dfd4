#!/usr/bin/env bash
# A pool of 3 import workers, 8 jobs started at once. Run from anywhere:
#
#   examples/import-pool/run.sh         # embedded SQLite store, no setup
#   examples/import-pool/run.sh redis   # Redis at $COORDD_REDIS_URL (default redis://127.0.0.1:6379/0)
#   examples/import-pool/run.sh postgres   # PostgreSQL at $COORDD_POSTGRES_DSN
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
redis_url=${COORDD_REDIS_URL:-redis://127.0.0.1:6379/0} redis_prefix=${COORDD_REDIS_PREFIX:-coordd-import-pool:}
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
export IMPORT_STATE=$COORDD_DATA_DIR/import-state
mkdir -p "$IMPORT_STATE"
cd "$here"
fail() { echo "FAILED: $*" >&2; exit 1; }
wait_for() { for _ in $(seq 200); do "$@" && return 0; sleep 0.1; done; fail "timed out waiting for: $*"; }
holders() { coordd sem status import -f "$spec" | grep -q "holders $1 "; }

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== 8 import jobs at once; at most 3 run, the others wait for a slot"
pids=()
for i in 1 2 3 4 5 6 7 8; do
  coordd sem run import -f "$spec" -- ./import.sh "$i" &
  pids+=($!)
done
wait_for holders 3
coordd sem status import -f "$spec"
for p in "${pids[@]}"; do
  wait "$p" || fail "an import job exited $?"
done
holders 0 || fail "slots still held"
echo OK
