package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/coordd/coordd/backends"
)

// The queue browser (backends.Queues): pages of a queue's jobs by state,
// one job in any state, and the operator's two actions on a job that has
// not run yet. A page takes its ids from an index alone and reads only the
// rows of the page, cut by the server as the dead set's pages are.

// browseColumns are partialJobColumns with the lease deadline and the
// state, ready split into ready and delayed at the statement's {now}.
const browseColumns = partialJobColumns + `, j.expires_at,
  CASE WHEN j.state = 'ready' AND j.available_at > {now} THEN 'delayed' ELSE j.state END`

// jobsWhere and jobsOrder are each state's condition and order
// (backends.Queues.JobsPage): ready in push order, delayed by the time it
// becomes available, running by lease deadline, dead as Dead lists it.
var (
	jobsWhere = map[string]string{
		backends.JobReady:   `state = 'ready' AND available_at <= {now}`,
		backends.JobDelayed: `state = 'ready' AND available_at > {now}`,
		backends.JobRunning: `state = 'running'`,
		backends.JobDead:    `state = 'dead'`,
	}
	jobsOrder = map[string]string{
		backends.JobReady:   `id`,
		backends.JobDelayed: `available_at, id`,
		backends.JobRunning: `expires_at, id`,
		backends.JobDead:    `id`,
	}
)

// qJobsPage is a page of one state: cut, cut, queue, [key,] limit, offset.
// {where}, {key} and {order} are filled per state (jobsPageQuery).
const qJobsPage = "SELECT " + browseColumns + ` FROM {p}queue_jobs j
JOIN (SELECT id FROM {p}queue_jobs WHERE queue = ? AND {where}{key} ORDER BY {order} LIMIT ? OFFSET ?) d ON d.id = j.id
ORDER BY {jorder}`

var (
	// qJobBrowseOne reads one job in any state: cut, cut, id, queue.
	qJobBrowseOne = Query{SQL: "SELECT " + browseColumns + ` FROM {p}queue_jobs j WHERE j.id = ? AND j.queue = ?`}

	// qJobCancel deletes a job that has not run yet: queue, id.
	qJobCancel = Query{SQL: `DELETE FROM {p}queue_jobs WHERE queue = ? AND id = ? AND state = 'ready'`}

	// qJobRunNow makes a delayed job available now: queue, id.
	qJobRunNow = Query{SQL: `UPDATE {p}queue_jobs SET available_at = {now} WHERE queue = ? AND id = ? AND state = 'ready' AND available_at > {now}`}
)

// jobsPageQuery is qJobsPage for state, with the key condition when
// byKey.
func jobsPageQuery(state string, byKey bool) Query {
	key := ""
	if byKey {
		key = " AND unique_key = ?"
	}
	order := jobsOrder[state]
	jorder := "j.id"
	if order != "id" {
		jorder = "j." + order[:len(order)-len(", id")] + ", j.id"
	}
	r := map[string]string{"{where}": jobsWhere[state], "{key}": key, "{order}": order, "{jorder}": jorder}
	q := qJobsPage
	for k, v := range r {
		q = strings.ReplaceAll(q, k, v)
	}
	return Query{SQL: q}
}

// JobsPage lists one page of queue's jobs in p.State (backends.Queues).
func (s *Core) JobsPage(ctx context.Context, queue string, p backends.JobPage) ([]backends.PartialJob, error) {
	if err := backends.CheckJobState(p.State); err != nil {
		return nil, err
	}
	cut := max(p.Cut, 0)
	d := s.DB.Dialect()
	args := []any{cut, cut, queue}
	if p.Key != "" {
		args = append(args, p.Key)
	}
	args = append(args, max(p.Limit, 0), max(p.Offset, 0))
	q := d.Text(jobsPageQuery(p.State, p.Key != ""))
	jobs := []backends.PartialJob{}
	_, err := s.DB.Read(ctx, func(c Conn) error {
		jobs = jobs[:0]
		rows, err := c.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, _, err := scanBrowsedJob(rows, queue, cut)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list %s jobs of queue %q: %w", p.State, queue, err)
	}
	return jobs, nil
}

// JobByID reads job id of queue in any state (backends.Queues).
func (s *Core) JobByID(ctx context.Context, queue string, id int64, cut int) (backends.PartialJob, string, error) {
	cut = max(cut, 0)
	d := s.DB.Dialect()
	var j backends.PartialJob
	var state string
	found, err := s.DB.Read(ctx, func(c Conn) error {
		var err error
		j, state, err = scanBrowsedJob(c.QueryRow(ctx, d.Text(qJobBrowseOne), cut, cut, id, queue), queue, cut)
		if err != nil {
			return err
		}
		return readAttemptErrors(ctx, c, d, &j)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && !found):
		return backends.PartialJob{}, "", fmt.Errorf("queue %q has no job %d: %w", queue, id, backends.ErrNotFound)
	case err != nil:
		return backends.PartialJob{}, "", fmt.Errorf("read job %d of queue %q: %w", id, queue, err)
	}
	return j, state, nil
}

// CancelJob deletes ready or delayed job id of queue (backends.Queues).
func (s *Core) CancelJob(ctx context.Context, queue string, id int64) error {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobCancel), queue, id))
	return backends.JobOutcome("cancel", "ready or delayed", queue, id, n, err)
}

// RunJobNow makes delayed job id of queue available now (backends.Queues;
// a store whose workers sleep on the server wakes one after it).
func (s *Core) RunJobNow(ctx context.Context, queue string, id int64) error {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qJobRunNow), queue, id))
	return backends.JobOutcome("run now", "delayed", queue, id, n, err)
}

// scanBrowsedJob reads a row of browseColumns: the job, cut at cut bytes,
// and its state.
func scanBrowsedJob(r Scanner, queue string, cut int) (backends.PartialJob, string, error) {
	j := backends.PartialJob{Job: backends.Job{Queue: queue}}
	var key sql.NullString
	var enq, avail int64
	var expires sql.NullInt64
	var lastErr []byte
	var state string
	if err := r.Scan(&j.ID, &j.Partition, &j.Payload, &j.PayloadSize, &key, &j.Priority, &j.Attempt, &enq, &avail, &lastErr, &expires, &state); err != nil {
		return j, "", err
	}
	j.Key, j.LastError = key.String, string(lastErr[:min(len(lastErr), cut)])
	j.EnqueuedAt, j.AvailableAt = FromMicros(enq), FromMicros(avail)
	if state == backends.JobRunning && expires.Valid {
		j.ExpiresAt = FromMicros(expires.Int64)
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, state, nil
}
