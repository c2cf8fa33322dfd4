#!/usr/bin/env bash
# A nightly report on exactly one server. Run from anywhere:
#
#   examples/nightly-report/run.sh         # embedded SQLite store, no setup
#   examples/nightly-report/run.sh mysql   # MySQL/MariaDB at $COORDD_MYSQL_DSN
#   examples/nightly-report/run.sh postgres   # PostgreSQL at $COORDD_POSTGRES_DSN
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
leader() { coordd status -f "$spec" | grep '^Leader:'; }
leader_is() { leader | grep -q "$1"; }
running() { coordd status -f "$spec" | grep 'cron.nightly-report' | grep -q "running $1 "; }

echo "== coordd apply (data dir $COORDD_DATA_DIR)"
coordd apply -f "$spec" --auto-approve

echo "== next runs"
coordd cron list -f "$spec"

echo "== run it now, by hand, through the same claim the scheduler uses"
coordd cron run nightly-report -f "$spec"

echo "== while a run is in progress, overlap: forbid skips another: exit 75"
REPORT_SECONDS=3 coordd cron run nightly-report -f "$spec" &
slow=$!
wait_for running 1
rc=0
coordd cron run nightly-report -f "$spec" || rc=$?
[ "$rc" -eq 75 ] || fail "overlapping run: exit $rc, want 75"
wait "$slow" || fail "the slow run exited $?"
coordd cron history nightly-report -f "$spec"

echo "== two servers: one leads and claims the scheduled runs"
coordd run -f "$spec" --host-id server-a 2>"$COORDD_DATA_DIR/server-a.log" &
a=$!
wait_for leader_is server-a
coordd run -f "$spec" --host-id server-b 2>"$COORDD_DATA_DIR/server-b.log" &
b=$!
leader
echo "== server-a stops (SIGTERM hands the lease back): server-b takes over"
kill -TERM "$a"
wait "$a" || fail "server-a exited $?"
wait_for leader_is server-b
leader
kill -TERM "$b"
wait "$b" || fail "server-b exited $?"
echo OK
