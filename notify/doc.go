// Package notify delivers failure events to on_failure hooks: a failed,
// timed-out, lost or missed cron run, a job moved to a queue's dead set.
//
// The leader finds events in what the stores already keep (a task's
// history and next time, a queue's dead set) rather than in a queue of
// its own, so that an event is never lost between its cause and its
// notice: a run recorded failed by a host that dies at once is found by
// whichever host leads next. The cluster backend's notices record (see
// backends.Notices) makes each event notified once across the cluster.
package notify
