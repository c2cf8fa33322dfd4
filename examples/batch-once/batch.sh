#!/bin/sh
# The batch job itself: anything that must not run twice at once. coordd
# gives it the slot's fencing token; a job that writes to shared storage
# can store it and refuse writes that carry a lower one (a holder that lost
# its slot without noticing).
echo "batch $1 starts: slot $COORDD_SLOT, fencing token $COORDD_FENCING_TOKEN, pid $$"
sleep "${BATCH_SECONDS:-2}"
echo "batch $1 done"
