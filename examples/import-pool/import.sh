#!/bin/sh
# One import job. coordd runs it holding a slot of `import`; COORDD_SLOT is
# the slot (0 to limit-1), so no two jobs running at once share a slot
# number. The mkdir below proves it: it fails if the slot is already taken.
# A real job would pass COORDD_FENCING_TOKEN along with its writes, so that
# the storage can refuse a write from a holder that has since lost its slot.
dir=${IMPORT_STATE:-/tmp}/slot-$COORDD_SLOT
mkdir "$dir" || { echo "import $1: slot $COORDD_SLOT is already in use" >&2; exit 99; }
echo "import $1 runs in slot $COORDD_SLOT, fencing token $COORDD_FENCING_TOKEN"
sleep "${IMPORT_SECONDS:-1}"
rmdir "$dir"
