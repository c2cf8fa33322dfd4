package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Waiters of lease-mode semaphores: the line, and the SLEEP/KILL
// wake-up (park.go) instead of polling.
//
// The line is semaphore_waiters: EnterWait gives each waiter a ticket (seq)
// above every live waiter's, and the acquire script grants a slot only
// while fewer live waiters are ahead of the caller than slots are free
// (qSemAcquire). A waiter that stops renewing (it crashed) drops out of the
// count when its record expires: it holds the line for at most its waiter
// lease.
//
// WaitSemaphore takes a dedicated connection and parks it in one statement,
// qSemPark, that both checks and sleeps:
//
//	SELECT '<tag>', d, may, SLEEP(d) FROM (... computed from the slots and the line ...)
//
// may is true when it is the owner's turn (a free slot row, and fewer live
// waiters ahead than free slots); d is then 0. Otherwise d is the time
// until the next event that can make it the owner's turn without a
// release: the earliest live holder's lease expires, or the record of
// another waiter expires (a crashed waiter ahead); at most what is left of
// the wait. As with idle queue workers (queue_park.go), the check and the
// sleep are one statement, so no wake-up is lost: the statement is in the
// processlist before it reads, so a release that commits after the read
// finds it there, and one that committed before is seen by the read.
//
// The tag's ticket is the waiter's seq, so sorting parked statements by
// text sorts them in line order. A release that freed a slot while waiters
// are in line (qSemReleaseFast counts them in the same transaction, so a
// release with nobody waiting costs nothing more) KILL QUERYs the parked
// statement with the lowest ticket: the waiter whose turn the slot makes
// (those before it were entitled already and are not parked). A waiter
// that leaves the line (it gave up), PutSemaphore and DeleteSemaphore wake
// parked waiters as well. A woken waiter runs the statement again rather
// than returning: it returns when the statement finds its turn (d = 0),
// when an event came due, or when its wait is over.
//
// A releaser that dies between its commit and its KILL leaves the waiter
// parked until its next event or the end of its SLEEP (the caller's max:
// a third of the waiter lease from the semaphore package). The repair pass
// (RepairWakeups, which the semaphore package runs when a caller starts
// waiting, and the daemon's leader periodically) wakes parked waiters of
// semaphores that have a free slot.
//
// While nothing happens a parked waiter costs one statement per park;
// with the semaphore package's loop, one renewal, one acquire and one park
// per third of the waiter lease (10 s by default), and one park more each
// time a holder's lease would run out (about every two thirds of a
// renewing holder's lease).

// unregisteredTicket is the park ticket of an owner that is not in line
// (WaitSemaphore without EnterWait): after every waiter in line.
const unregisteredTicket = int64(1) << 62

// lineKey keys the tickets the store remembers.
func lineKey(name, owner string) string { return name + "\x00" + owner }

// rememberTicket records owner's ticket in name's line (EnterWait).
func (ss *sessions) rememberTicket(name, owner string, seq int64) {
	ss.tickets.Store(lineKey(name, owner), seq)
}

// forgetTicket drops owner's ticket (a grant or LeaveWait).
func (ss *sessions) forgetTicket(name, owner string) { ss.tickets.Delete(lineKey(name, owner)) }

// ticket is owner's ticket in name's line, unregisteredTicket when this
// store did not register it.
func (ss *sessions) ticket(name, owner string) int64 {
	if v, ok := ss.tickets.Load(lineKey(name, owner)); ok {
		return v.(int64)
	}
	return unregisteredTicket
}

// liveW is liveSQL for the slot row aliased t.
const liveW = `(t.state = 'LOCK' AND t.expires_at > ` + nowSQL + `)`

// qSemPark is the parked statement of a lease-mode waiter after the tag
// column that parkSem prepends. Columns: d, the seconds it sleeps; may,
// true when it is the owner's turn now (d is then 0); then SLEEP(d). No
// row: the semaphore is absent (WaitSemaphore returns at once and
// TryAcquire reports it). d is at least a millisecond otherwise, so that a
// waiter never spins. Arguments: left (seconds), owner, owner, name.
const qSemPark = "p.d, p.may, SLEEP(p.d) FROM (\n" +
	"  SELECT c.may, IF(c.may, 0, GREATEST(0.001, LEAST(c.lft, GREATEST(0, LEAST(c.hexp, c.wexp) - c.now) / 1000000))) AS d\n" +
	"  FROM (SELECT ? AS lft, " + nowSQL + " AS now,\n" +
	"      EXISTS (SELECT 1 FROM `{p}semaphore_slots` t WHERE t.name = s.name AND " + freeT + ")\n" +
	"        AND (SELECT count(*) FROM `{p}semaphore_waiters` w WHERE w.name = s.name AND w.expires_at > " + nowSQL + "\n" +
	"          AND w.seq < COALESCE((SELECT x.seq FROM `{p}semaphore_waiters` x\n" +
	"            WHERE x.name = s.name AND x.owner = ? AND x.expires_at > " + nowSQL + "), " + noTicket + "))\n" +
	"        < s.lim - (SELECT count(*) FROM `{p}semaphore_slots` t WHERE t.name = s.name AND " + liveW + ") AS may,\n" +
	"      COALESCE((SELECT MIN(t.expires_at) FROM `{p}semaphore_slots` t WHERE t.name = s.name AND " + liveW + "), " + farFuture + ") AS hexp,\n" +
	"      COALESCE((SELECT MIN(w.expires_at) FROM `{p}semaphore_waiters` w\n" +
	"        WHERE w.name = s.name AND w.owner <> ? AND w.expires_at > " + nowSQL + "), " + farFuture + ") AS wexp\n" +
	"    FROM `{p}semaphores` s WHERE s.name = ?) c\n" +
	") p"

// qSemLiveHolders counts a semaphore's live lease holders (the repair
// pass), without locking.
const qSemLiveHolders = "SELECT count(*) FROM `{p}semaphore_slots` WHERE name = ? AND " + liveSQL

// semPark is how one parked statement of a waiter ended.
type semPark struct {
	absent bool // no row: the semaphore does not exist
	may    bool // the owner's turn: try now
	woken  bool // a KILL QUERY ended it
}

// parkSem runs park (qSemPark, or qInstPark for an instance) with args
// on d, tagged with tag, and reports how it ended.
func (s *Store) parkSem(ctx context.Context, d *dedicated, tag, park string, args []any, left time.Duration) (semPark, error) {
	var r semPark
	s.pool.CountTrip()
	err := s.interruptible(ctx, d, left+30*time.Second, func(rctx context.Context) error {
		rows, err := d.conn.QueryContext(rctx, "SELECT ?, "+s.q(park), append([]any{tag}, args...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			r.absent = true
			return rows.Err()
		}
		var tagCol string
		var slept float64
		var interrupted int64
		if err := rows.Scan(&tagCol, &slept, &r.may, &interrupted); err != nil {
			return err
		}
		r.woken = interrupted == 1 // SLEEP returns 1 when killed, where the server does not fail the statement
		return rows.Err()
	})
	if errors.Is(err, errInterruptedStmt) {
		return semPark{woken: true}, nil
	}
	return r, err
}

// leaseWait parks owner, a waiter of lease-mode semaphore name, until it
// may be its turn, maxWait elapsed or ctx ended (see the comment at the top
// of this file). It returns nil in the first two cases and ctx's error in
// the last.
func (s *Store) leaseWait(ctx context.Context, name, owner string, maxWait time.Duration) error {
	return s.parkWait(ctx, name, owner, maxWait, qSemPark, func(left time.Duration) []any {
		return []any{sleepSeconds(left), owner, owner, name}
	})
}

// parkWait is leaseWait's loop for semaphore or instance reference name:
// it parks park with the arguments args gives for what is left of the
// wait, on the channel of name, tagged with owner's ticket in its line.
func (s *Store) parkWait(ctx context.Context, name, owner string, maxWait time.Duration, park string, args func(left time.Duration) []any) error {
	ok, err := s.hasSchema(ctx)
	if err != nil {
		return s.waitErr(ctx, name, err)
	}
	if !ok || maxWait < time.Millisecond {
		return nil
	}
	deadline := time.Now().Add(maxWait)
	d, err := s.dedicate(ctx)
	if err != nil {
		return s.waitErr(ctx, name, fmt.Errorf("dedicated connection: %w", err))
	}
	tag := parkTag(s.channel("semaphore", name), s.sess.ticket(name, owner))
	for {
		left := time.Until(deadline)
		if ctx.Err() != nil || left < time.Millisecond {
			s.undedicate(d)
			return ctx.Err()
		}
		r, err := s.parkSem(ctx, d, tag, park, args(left), left)
		switch {
		case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			s.undedicate(d) // parkSem killed the statement; the connection is fine
			return err
		case err != nil:
			d.discard()
			return s.waitErr(ctx, name, err)
		case r.absent || r.may:
			s.undedicate(d)
			return nil
		}
		// Woken, or an event came due: look again (the statement returns
		// at once when it is the owner's turn, and parks otherwise).
	}
}

// wakeSemaphore wakes up to n waiters parked on semaphore name, lowest
// ticket first, after a change that may have made it their turn. The
// change is committed, so a failure only delays them until their next
// event or the end of their SLEEP, and is not returned; ctx's cancellation
// does not stop it.
func (s *Store) wakeSemaphore(ctx context.Context, name string, n int) {
	if n < 1 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
	defer cancel()
	_, _ = s.wakeParked(wctx, s.channel("semaphore", name), n)
}
