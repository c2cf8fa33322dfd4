package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/internal/slots"
	"github.com/coordd/coordd/spec"
)

// A semaphore is its row in semaphores (the config and the fencing counter
// every grant bumps), its slot rows in semaphore_slots (max(limit, live
// holders) of them, package slots), its line in semaphore_waiters
// (waiters_line.go) and, when keyed, the rows of its instances
// (instance.go). Every write transaction that decides from what it reads
// about a semaphore locks the semaphore's row first ({lock}), so that on a
// database with row locks (MySQL, PostgreSQL) such transactions run one
// at a time per semaphore and each reads what the previous one committed;
// on SQLite the write transaction holds the whole file anyway.
//
// A slot row is held or free. The Standard schema tells them apart by its
// owner (NULL: free). MySQL's rows also carry the lock row's state column
// (FREE or LOCK), which its acquire and release scripts guard on and older
// binaries read: there every shared statement reads state and writes it
// with the owner. slotQuery writes a statement once for both, with these
// tokens:
//
//	{live}      the row is held by an unexpired lease
//	{free}      anyone may take the row: never held, released or expired
//	            (the exact complement of {live})
//	{held}      the SET of state a take adds
//	{freed}     the SET of state a release adds
//	{countlock} " FOR UPDATE" after a count on MySQL, which may lock the
//	            rows it counts; PostgreSQL may not, and needs not: its next
//	            statement reads what was committed before the semaphore's
//	            row lock was granted
var slotTokens = [...]*strings.Replacer{
	Standard: strings.NewReplacer(
		"{live}", "(owner IS NOT NULL AND expires_at > {now})",
		"{free}", "(owner IS NULL OR expires_at <= {now})",
		"{held}", "", "{freed}", "", "{countlock}", ""),
	MySQL: strings.NewReplacer(
		"{live}", "(state = 'LOCK' AND expires_at > {now})",
		"{free}", "(state = 'FREE' OR expires_at <= {now})",
		"{held}", "state = 'LOCK', ", "{freed}", "state = 'FREE', ", "{countlock}", " FOR UPDATE"),
}

// slotQuery is a statement on slot rows written once with the tokens of
// slotTokens.
func slotQuery(t string) Query {
	return Query{SQL: slotTokens[Standard].Replace(t), MySQL: slotTokens[MySQL].Replace(t)}
}

var (
	// qSemUpsert creates the semaphore or updates its config. It never
	// touches the fencing counter of an existing row, so fencing keeps
	// increasing across updates. A new row's counter starts at the store's
	// clock in microseconds (the rule every backend follows), so a
	// semaphore deleted and created again, or replaced from another
	// backend, still hands out numbers above any a holder of the old one
	// can have. Arguments: name, limit, lease ns, mode, wake, max_waiting,
	// max_hold ns, keyed.
	qSemUpsert = Query{
		SQL: `INSERT INTO {p}semaphores (name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed, fencing)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, {now})
ON CONFLICT (name) DO UPDATE SET lim = excluded.lim, lease_ns = excluded.lease_ns, mode = excluded.mode,
  wake = excluded.wake, max_waiting = excluded.max_waiting, max_hold_ns = excluded.max_hold_ns, keyed = excluded.keyed`,
		MySQL: `INSERT INTO {p}semaphores (name, lim, lease_ns, mode, wake, max_waiting, max_hold_ns, keyed, fencing)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, {now})
ON DUPLICATE KEY UPDATE lim = VALUES(lim), lease_ns = VALUES(lease_ns), mode = VALUES(mode),
  wake = VALUES(wake), max_waiting = VALUES(max_waiting), max_hold_ns = VALUES(max_hold_ns), keyed = VALUES(keyed)`,
	}

	// qSemLock reads and locks the semaphore's row. No row: the semaphore
	// is absent.
	qSemLock = Query{SQL: `SELECT lim, fencing, max_waiting, mode, keyed FROM {p}semaphores WHERE name = ?{lock}`}

	// qSemSlots lists (and locks) a semaphore's slot rows, each with
	// whether it is live.
	qSemSlots = slotQuery(`SELECT slot, {live} FROM {p}semaphore_slots WHERE name = ? ORDER BY slot{lock}`)

	// qSemDropSlots deletes the listed slot rows that are free; a live
	// row is never deleted, whatever the list says. Arguments: name, the
	// slot numbers.
	qSemDropSlots = slotQuery(`DELETE FROM {p}semaphore_slots WHERE name = ? AND {free} AND slot {in}`)

	// qSemAddSlots, then qSemAddSlotRow once per row joined with commas,
	// adds free slot rows: (name, slot) each.
	qSemAddSlots   = Query{SQL: `INSERT INTO {p}semaphore_slots (name, slot) VALUES `}
	qSemAddSlotRow = `(?, ?)`

	// qSemDropFree deletes every free slot row of a semaphore.
	qSemDropFree = slotQuery(`DELETE FROM {p}semaphore_slots WHERE name = ? AND {free}`)

	// qSemLiveCount counts a semaphore's live holders.
	qSemLiveCount = slotQuery(`SELECT count(*) FROM {p}semaphore_slots WHERE name = ? AND {live}{countlock}`)

	// qSemDrain sets the limit to 0, so that nobody more is admitted.
	qSemDrain = Query{SQL: `UPDATE {p}semaphores SET lim = 0 WHERE name = ?`}

	// qSemDrop removes every row of a semaphore, its instances' first,
	// explicitly (a store need not cascade).
	qSemDrop = []Query{
		{SQL: `DELETE FROM {p}semaphore_instance_waiters WHERE name = ?`},
		{SQL: `DELETE FROM {p}semaphore_instance_slots WHERE name = ?`},
		{SQL: `DELETE FROM {p}semaphore_waiters WHERE name = ?`},
		{SQL: `DELETE FROM {p}semaphore_slots WHERE name = ?`},
		{SQL: `DELETE FROM {p}semaphores WHERE name = ?`},
	}
)

// CheckSemaphore refuses a config no store can hold.
func CheckSemaphore(cfg backends.SemaphoreConfig) error {
	if cfg.Name == "" {
		return errors.New("put semaphore: empty name")
	}
	if cfg.Limit < 0 {
		return fmt.Errorf("put semaphore %q: negative limit %d", cfg.Name, cfg.Limit)
	}
	return nil
}

// SlotRows is the number of slot rows a semaphore keeps for its limit:
// none when its slots are not rows (keyed: its instances hold their own;
// MySQL's mode session: named locks). Rows left there by lease holders
// from before such a change retire on release.
func SlotRows(limit int, mode string, keyed bool) int {
	if keyed || mode == spec.ModeSession {
		return 0
	}
	return limit
}

// PutSemaphoreRow creates or updates the semaphore's row (qSemUpsert).
func PutSemaphoreRow(ctx context.Context, c Conn, d *Dialect, cfg backends.SemaphoreConfig) error {
	maxWaiting := cfg.MaxWaiting
	if maxWaiting < 0 {
		maxWaiting = -1
	}
	_, err := c.Exec(ctx, d.Text(qSemUpsert), cfg.Name, cfg.Limit, int64(cfg.Lease), cfg.Mode, cfg.Wake, maxWaiting, int64(cfg.MaxHold), cfg.Keyed)
	return err
}

// SemRow is a semaphore's row as qSemLock reads it.
type SemRow struct {
	Limit, MaxWaiting int
	Fencing           int64
	Mode              string
	Keyed             bool
}

// LockSemaphore reads and locks the semaphore's row; found is false when
// it is absent.
func LockSemaphore(ctx context.Context, c Conn, d *Dialect, name string) (r SemRow, found bool, err error) {
	err = c.QueryRow(ctx, d.Text(qSemLock), name).Scan(&r.Limit, &r.Fencing, &r.MaxWaiting, &r.Mode, &r.Keyed)
	if errors.Is(err, sql.ErrNoRows) {
		return SemRow{}, false, nil
	}
	return r, err == nil, err
}

// RepairSlots makes the slot rows max(limit, live holders): it deletes
// free rows, highest first, while above, and (when grow) inserts the lowest
// unused numbers while below. Run it holding the semaphore's row lock.
func RepairSlots(ctx context.Context, c Conn, d *Dialect, name string, limit int, grow bool) error {
	rows, err := c.Query(ctx, d.Text(qSemSlots), name)
	if err != nil {
		return err
	}
	var have []slots.Slot
	for rows.Next() {
		var s slots.Slot
		if err := rows.Scan(&s.N, &s.Live); err != nil {
			rows.Close()
			return err
		}
		have = append(have, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	drop, add := slots.Repair(have, limit, grow)
	for _, l := range ListChunks(d, drop) {
		if len(l) == 0 {
			continue
		}
		q, args, err := In(d, d.Pick(qSemDropSlots), l, []any{name})
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, q, args...); err != nil {
			return err
		}
	}
	for _, ch := range Chunks(add, inventoryChunk) {
		args := make([]any, 0, 2*len(ch))
		for _, n := range ch {
			args = append(args, name, n)
		}
		if _, err := c.Exec(ctx, d.Render(d.Pick(qSemAddSlots)+Tuples(qSemAddSlotRow, len(ch))), args...); err != nil {
			return err
		}
	}
	return nil
}

// LiveHolders counts a semaphore's live holders: of its slot rows and of
// its instances' (its own named locks, MySQL's mode session, are the
// store's to add).
func LiveHolders(ctx context.Context, c Conn, d *Dialect, name string) (int, error) {
	var held, inst int
	if err := c.QueryRow(ctx, d.Text(qSemLiveCount), name).Scan(&held); err != nil {
		return 0, err
	}
	if err := c.QueryRow(ctx, d.Text(qInstLiveCount), name).Scan(&inst); err != nil {
		return 0, err
	}
	return held + inst, nil
}

// DrainSemaphore sets the limit to 0 and deletes the free slot rows: the
// held ones retire on release, and instances admit nobody meanwhile.
func DrainSemaphore(ctx context.Context, c Conn, d *Dialect, name string) error {
	if _, err := c.Exec(ctx, d.Text(qSemDrain), name); err != nil {
		return err
	}
	_, err := c.Exec(ctx, d.Text(qSemDropFree), name)
	return err
}

// DropSemaphore deletes every row of the semaphore.
func DropSemaphore(ctx context.Context, c Conn, d *Dialect, name string) error {
	for _, q := range qSemDrop {
		if _, err := c.Exec(ctx, d.Text(q), name); err != nil {
			return err
		}
	}
	return nil
}

// PutSemaphore creates or updates the semaphore and repairs its slot rows
// to max(limit, live holders).
func (s *Core) PutSemaphore(ctx context.Context, cfg backends.SemaphoreConfig) error {
	if err := CheckSemaphore(cfg); err != nil {
		return err
	}
	d := s.DB.Dialect()
	err := s.DB.Write(ctx, func(c Conn) error {
		if err := PutSemaphoreRow(ctx, c, d, cfg); err != nil {
			return err
		}
		return RepairSlots(ctx, c, d, cfg.Name, SlotRows(cfg.Limit, cfg.Mode, cfg.Keyed), true)
	})
	if err != nil {
		return fmt.Errorf("put semaphore %q: %w", cfg.Name, err)
	}
	return nil
}

// DeleteSemaphore removes the semaphore when nobody holds it. Otherwise it
// drains it: limit 0, free slots gone, ErrHeld; held slots retire on
// release. The live holders of a keyed semaphore's instances count as its
// holders; they keep their rows until they release, and the instances
// admit nobody meanwhile (the limit they read is 0).
func (s *Core) DeleteSemaphore(ctx context.Context, name string) error {
	d := s.DB.Dialect()
	held := 0
	err := s.DB.Write(ctx, func(c Conn) error {
		if err := lockSemaphoreRow(ctx, c, d, name); err != nil {
			return err
		}
		var err error
		if held, err = LiveHolders(ctx, c, d, name); err != nil {
			return err
		}
		if held > 0 {
			return DrainSemaphore(ctx, c, d, name)
		}
		return DropSemaphore(ctx, c, d, name)
	})
	if err != nil {
		return fmt.Errorf("delete semaphore %q: %w", name, err)
	}
	if held > 0 {
		return fmt.Errorf("delete semaphore %q: %d live holders: %w", name, held, backends.ErrHeld)
	}
	return nil
}

// ReturningInt sends q, an UPDATE that returns one integer of the row it
// changed, in one round trip: with RETURNING in the Standard flavor, and
// in MySQL's, which has no RETURNING, by setting LAST_INSERT_ID(expr),
// which the server reports with the affected rows. ok is false when the
// UPDATE matched no row.
func ReturningInt(ctx context.Context, c Conn, d *Dialect, q Query, args ...any) (v int64, ok bool, err error) {
	if d.Flavor == MySQL {
		res, err := c.Exec(ctx, d.Text(q), args...)
		if err != nil {
			return 0, false, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return 0, false, err
		}
		v, err = res.LastInsertId()
		return v, err == nil, err
	}
	err = c.QueryRow(ctx, d.Text(q), args...).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}
