#!/bin/sh
# One job: the payload arrives on stdin. Exit 0 acks the job; anything else
# retries it. COORDD_JOB_ID and COORDD_ATTEMPT say which job and which try.
payload=$(cat)
case $payload in
  *corrupt*) echo "job $COORDD_JOB_ID attempt $COORDD_ATTEMPT: cannot decode $payload" >&2; exit 1 ;;
esac
echo "job $COORDD_JOB_ID attempt $COORDD_ATTEMPT: thumbnail for $payload"
