package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// The cluster's applied state: the apply lock (a lease in store time), the
// inventory of applied objects and the log of applies.
var (
	// qLockTake takes or renews the apply lock when it is free, expired or
	// already owner's, against one instant of the store's clock; it
	// matches no row while another owner's lease is live. On MySQL, which
	// has no conditional upsert, it matches no row when the row is absent
	// either (qLockInsert then). Arguments: owner, lease µs, owner.
	qLockTake = Query{
		SQL: `INSERT INTO {p}apply_lock AS l (id, owner, expires_at) VALUES (1, ?, {now} + ?)
ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE l.owner = ? OR l.expires_at <= {now}`,
		MySQL: `UPDATE {p}apply_lock SET owner = ?, expires_at = {now} + ?
WHERE id = 1 AND (owner = ? OR expires_at <= {now})`,
	}

	// qLockHolder reads (and locks) the apply lock row.
	qLockHolder = Query{SQL: `SELECT owner, expires_at FROM {p}apply_lock WHERE id = 1{lock}`}

	// qLockInsert creates the apply lock row for owner (MySQL's take of an
	// absent row). Arguments: owner, lease µs.
	qLockInsert = Query{SQL: `INSERT INTO {p}apply_lock (id, owner, expires_at) VALUES (1, ?, {now} + ?)`}

	// qLockRelease deletes the apply lock only if owner holds it.
	qLockRelease = Query{SQL: `DELETE FROM {p}apply_lock WHERE id = 1 AND owner = ?`}

	// qLockHeld is a row only while owner holds an unexpired apply lock;
	// it locks the row so that the lock cannot change hands before commit.
	qLockHeld = Query{SQL: `SELECT 1 FROM {p}apply_lock WHERE id = 1 AND owner = ? AND expires_at > {now}{lock}`}

	// qNextGeneration is one more than the last apply's generation, and
	// the instant the apply is recorded at.
	qNextGeneration = Query{SQL: `SELECT coalesce(max(generation), 0) + 1, {now} FROM {p}apply_log`}

	// qInventoryPutHead, qInventoryPutRow (one per entry, joined with
	// commas) and qInventoryPutTail make a multi-row upsert of inventory
	// entries.
	qInventoryPutHead = Query{SQL: `INSERT INTO {p}inventory (kind, name, backend, backend_type, spec, status, previous, generation) VALUES `}
	qInventoryPutRow  = `(?, ?, ?, ?, ?, ?, ?, ?)`
	qInventoryPutTail = Query{
		SQL: `
ON CONFLICT (kind, name) DO UPDATE SET backend = excluded.backend, backend_type = excluded.backend_type,
  spec = excluded.spec, status = excluded.status, previous = excluded.previous, generation = excluded.generation`,
		MySQL: `
ON DUPLICATE KEY UPDATE backend = VALUES(backend), backend_type = VALUES(backend_type),
  spec = VALUES(spec), status = VALUES(status), previous = VALUES(previous), generation = VALUES(generation)`,
	}

	// qInventoryDeleteHead and qInventoryDeleteRow delete many entries:
	// the head, then one qInventoryDeleteRow per address, then ")".
	qInventoryDeleteHead = Query{SQL: `DELETE FROM {p}inventory WHERE (kind, name) IN (`}
	qInventoryDeleteRow  = `(?, ?)`

	// qApplyRecord appends one apply record.
	qApplyRecord = Query{SQL: `INSERT INTO {p}apply_log (generation, spec_hash, host, at, summary) VALUES (?, ?, ?, ?, ?)`}

	// qInventory reads the inventory, sorted by kind then name.
	qInventory = Query{SQL: `SELECT kind, name, backend, backend_type, spec, status, previous, generation
FROM {p}inventory ORDER BY kind, name`}

	// qFindApply reads the latest apply record of one spec hash.
	qFindApply = Query{SQL: `SELECT generation, spec_hash, host, at, summary FROM {p}apply_log
WHERE spec_hash = ? ORDER BY generation DESC LIMIT 1`}

	// qLastApply reads the latest apply record.
	qLastApply = Query{SQL: `SELECT generation, spec_hash, host, at, summary FROM {p}apply_log ORDER BY generation DESC LIMIT 1`}
)

// inventoryChunk is how many inventory rows one multi-row statement writes
// (8 parameters each, far below every store's limit on parameters).
const inventoryChunk = 500

// TryLockApply takes the apply lock for owner for ttl of store time: when
// it is absent, expired or already owner's (a renewal).
func (s *Core) TryLockApply(ctx context.Context, owner string, ttl time.Duration) (func(context.Context) error, error) {
	if owner == "" {
		return nil, errors.New("lock apply: empty owner")
	}
	us, err := LeaseMicros(ttl)
	if err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	d := s.DB.Dialect()
	err = s.DB.Write(ctx, func(c Conn) error {
		n, err := Affected(c.Exec(ctx, d.Text(qLockTake), owner, us, owner))
		if err != nil || n == 1 {
			return err
		}
		var holder string
		var exp int64
		err = c.QueryRow(ctx, d.Text(qLockHolder)).Scan(&holder, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := c.Exec(ctx, d.Text(qLockInsert), owner, us); err != nil {
				if d.IsDuplicate(err) {
					return ErrRetry
				}
				return err
			}
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("held by %q until %s: %w", holder, FromMicros(exp).Format(time.RFC3339), backends.ErrLocked)
	})
	if err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	unlock := func(ctx context.Context) error {
		if _, err := s.DB.WriteOne(ctx, d.Text(qLockRelease), owner); err != nil {
			return fmt.Errorf("unlock apply: %w", err)
		}
		return nil
	}
	return unlock, nil
}

// CommitApply writes the inventory changes and a new apply record in one
// transaction, only while owner holds the apply lock. Entries are written
// in multi-row statements of inventoryChunk rows.
func (s *Core) CommitApply(ctx context.Context, owner string, rec backends.ApplyRecord, put []backends.InventoryEntry, remove []spec.Address) (int64, error) {
	putArgs := make([][]any, 0, len(put))
	for _, e := range put {
		var prev sql.NullString
		if e.Previous != nil {
			b, err := json.Marshal(e.Previous)
			if err != nil {
				return 0, fmt.Errorf("commit apply: %s previous: %w", e.Address, err)
			}
			prev = sql.NullString{String: string(b), Valid: true}
		}
		putArgs = append(putArgs, []any{string(e.Address.Kind), e.Address.Name, e.Backend, e.BackendType, string(e.Spec), e.Status, prev, nil})
	}
	d := s.DB.Dialect()
	var gen int64
	err := s.DB.Write(ctx, func(c Conn) error {
		err := c.QueryRow(ctx, d.Text(qLockHeld), owner).Scan(new(int))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("apply lock not held by %q: %w", owner, backends.ErrLost)
		}
		if err != nil {
			return err
		}
		var at int64
		if err := c.QueryRow(ctx, d.Text(qNextGeneration)).Scan(&gen, &at); err != nil {
			return err
		}
		for _, ch := range Chunks(putArgs, inventoryChunk) {
			args := make([]any, 0, 8*len(ch))
			for _, a := range ch {
				a[7] = gen
				args = append(args, a...)
			}
			q := d.Pick(qInventoryPutHead) + Tuples(qInventoryPutRow, len(ch)) + d.Pick(qInventoryPutTail)
			if _, err := c.Exec(ctx, d.Render(q), args...); err != nil {
				return fmt.Errorf("write inventory: %w", err)
			}
		}
		for _, ch := range Chunks(remove, inventoryChunk) {
			args := make([]any, 0, 2*len(ch))
			for _, a := range ch {
				args = append(args, string(a.Kind), a.Name)
			}
			q := d.Pick(qInventoryDeleteHead) + Tuples(qInventoryDeleteRow, len(ch)) + ")"
			if _, err := c.Exec(ctx, d.Render(q), args...); err != nil {
				return fmt.Errorf("remove inventory: %w", err)
			}
		}
		_, err = c.Exec(ctx, d.Text(qApplyRecord), gen, rec.SpecHash, rec.Host, at, rec.Summary)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("commit apply: %w", err)
	}
	return gen, nil
}

// LoadState reads the inventory and the last apply record in one snapshot.
// A store that was never migrated reads as empty.
func (s *Core) LoadState(ctx context.Context) (backends.State, error) {
	d := s.DB.Dialect()
	var st backends.State
	_, err := s.DB.Read(ctx, func(c Conn) error {
		st = backends.State{}
		rows, err := c.Query(ctx, d.Text(qInventory))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanInventory(rows)
			if err != nil {
				return err
			}
			st.Entries = append(st.Entries, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		st.Last, err = scanApply(c.QueryRow(ctx, d.Text(qLastApply)))
		return err
	})
	if err != nil {
		return backends.State{}, fmt.Errorf("load state: %w", err)
	}
	return st, nil
}

// scanInventory reads one inventory row (qInventory's columns).
func scanInventory(rows *sql.Rows) (backends.InventoryEntry, error) {
	var e backends.InventoryEntry
	var kind, specJSON string
	var prev sql.NullString
	if err := rows.Scan(&kind, &e.Address.Name, &e.Backend, &e.BackendType, &specJSON, &e.Status, &prev, &e.Generation); err != nil {
		return e, err
	}
	e.Address.Kind = spec.Kind(kind)
	if specJSON != "" {
		e.Spec = json.RawMessage(specJSON)
	}
	if prev.Valid {
		e.Previous = new(backends.Placement)
		if err := json.Unmarshal([]byte(prev.String), e.Previous); err != nil {
			return e, fmt.Errorf("%s previous: %w", e.Address, err)
		}
	}
	return e, nil
}

// scanApply reads one apply record (generation, spec_hash, host, at in µs,
// summary); nil when there is none.
func scanApply(row *sql.Row) (*backends.ApplyRecord, error) {
	var a backends.ApplyRecord
	var at int64
	err := row.Scan(&a.Generation, &a.SpecHash, &a.Host, &at, &a.Summary)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.At = FromMicros(at)
	return &a, nil
}

// FindApply returns the latest apply record of specHash.
func (s *Core) FindApply(ctx context.Context, specHash string) (backends.ApplyRecord, error) {
	var r *backends.ApplyRecord
	_, err := s.DB.ReadOne(ctx, func(c Conn) (err error) {
		r, err = scanApply(c.QueryRow(ctx, s.DB.Dialect().Text(qFindApply), specHash))
		return err
	})
	if err != nil {
		return backends.ApplyRecord{}, fmt.Errorf("find apply: %w", err)
	}
	if r == nil {
		return backends.ApplyRecord{}, fmt.Errorf("spec hash %.12s: %w", specHash, backends.ErrNotFound)
	}
	return *r, nil
}

// LastApply reads the latest apply record; nil before the first apply.
func (s *Core) LastApply(ctx context.Context) (*backends.ApplyRecord, error) {
	var r *backends.ApplyRecord
	_, err := s.DB.ReadOne(ctx, func(c Conn) (err error) {
		r, err = scanApply(c.QueryRow(ctx, s.DB.Dialect().Text(qLastApply)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("last apply: %w", err)
	}
	return r, nil
}
