#!/bin/sh
# The reindex of one catalogue, the key sem run gives it. It logs its start,
# then (for run.sh) runs until the file $REINDEX_HOLD no longer exists, so
# that the demo controls how long it runs.
echo "reindex $1 of $COORDD_SEMAPHORE_KEY starts (fencing token $COORDD_FENCING_TOKEN)"
echo "$COORDD_SEMAPHORE_KEY $1" >> "${REINDEX_LOG:-/dev/null}"
while [ -n "${REINDEX_HOLD:-}" ] && [ -e "$REINDEX_HOLD" ]; do sleep 0.1; done
echo "reindex $1 of $COORDD_SEMAPHORE_KEY done"
