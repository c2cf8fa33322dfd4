#!/usr/bin/env bash
# A thumbnail queue: push, deduplicate, work, retry, dead set. Run from
# anywhere:
#
#   examples/thumbnails/run.sh            # embedded SQLite store, no setup
#   examples/thumbnails/run.sh postgres   # PostgreSQL at $COORDD_POSTGRES_DSN
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

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== push five images; jobs of one key run in push order (and the key deduplicates)"
for i in 1 2 3 4 5; do
  coordd queue push thumbnails -f "$spec" --key "image-$i" "{\"image\": $i}"
done
first=$(coordd queue push thumbnails -f "$spec" --key image-6 '{"image": 6}')
again=$(coordd queue push thumbnails -f "$spec" --key image-6 '{"image": 6, "again": true}')
echo "image-6 pushed twice: job $first, then $again"
[ "$first" = "$again" ] || fail "unique: pending let a second image-6 in"
echo '{"image": 7, "corrupt": true}' | coordd queue push thumbnails -f "$spec" --key image-7 -
coordd queue stats thumbnails -f "$spec"

echo "== two workers drain the queue; the corrupt image fails 3 times"
coordd queue work thumbnails -f "$spec" --concurrency 2 --drain -- ./thumb.sh
coordd queue stats thumbnails -f "$spec"

echo "== the dead set"
coordd queue dead thumbnails -f "$spec"
coordd queue dead thumbnails -f "$spec" --json | grep -q '"key": "image-7"' || fail "image-7 is not in the dead set"
coordd queue dead thumbnails -f "$spec" --purge
coordd queue stats thumbnails -f "$spec" --json | grep -q '"dead": 0' || fail "the dead set is not empty"
echo OK
