package mysql

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

const (
	// qLockTake takes or renews the apply lock when the row is expired or
	// already owner's; it matches no row while another owner's lease is live
	// (or when the row is absent).
	qLockTake = "UPDATE `{p}apply_lock` SET owner = ?, expires_at = " + nowSQL + ` + ?
WHERE id = 1 AND (owner = ? OR expires_at <= ` + nowSQL + `)`

	// qLockHolder reads (and locks) the apply lock row.
	qLockHolder = "SELECT owner, expires_at FROM `{p}apply_lock` WHERE id = 1 FOR UPDATE"

	// qLockInsert creates the apply lock row for owner.
	qLockInsert = "INSERT INTO `{p}apply_lock` (id, owner, expires_at) VALUES (1, ?, " + nowSQL + " + ?)"

	// qLockRelease deletes the apply lock only if owner holds it.
	qLockRelease = "DELETE FROM `{p}apply_lock` WHERE id = 1 AND owner = ?"

	// qLockHeld is a row only while owner holds an unexpired apply lock; it
	// locks the row so that the lock cannot change hands before commit.
	qLockHeld = "SELECT 1 FROM `{p}apply_lock` WHERE id = 1 AND owner = ? AND expires_at > " + nowSQL + " FOR UPDATE"

	// qNextGeneration is one more than the last apply's generation, and the
	// instant the apply is recorded at.
	qNextGeneration = "SELECT coalesce(max(generation), 0) + 1, " + nowSQL + " FROM `{p}apply_log`"

	// qInventoryPutHead and qInventoryPutRow make a multi-row upsert of
	// inventory entries: the head, then one qInventoryPutRow per entry
	// (joined with commas), then qInventoryPutTail.
	qInventoryPutHead = "INSERT INTO `{p}inventory` (kind, name, backend, backend_type, spec, status, previous, generation) VALUES "
	qInventoryPutRow  = "(?, ?, ?, ?, ?, ?, ?, ?)"
	qInventoryPutTail = ` ON DUPLICATE KEY UPDATE backend = VALUES(backend), backend_type = VALUES(backend_type),
  spec = VALUES(spec), status = VALUES(status), previous = VALUES(previous), generation = VALUES(generation)`

	// qInventoryDeleteHead and qInventoryDeleteRow delete many entries:
	// the head, then qInventoryDeleteRow per address inside IN (...).
	qInventoryDeleteHead = "DELETE FROM `{p}inventory` WHERE (kind, name) IN ("
	qInventoryDeleteRow  = "(?, ?)"

	// qApplyRecord appends one apply record.
	qApplyRecord = "INSERT INTO `{p}apply_log` (generation, spec_hash, host, at, summary) VALUES (?, ?, ?, ?, ?)"

	// qInventory reads the inventory, sorted by kind then name.
	qInventory = "SELECT kind, name, backend, backend_type, spec, status, previous, generation\nFROM `{p}inventory` ORDER BY kind, name"

	// qFindApply reads the latest apply record of one spec hash.
	qFindApply = "SELECT generation, spec_hash, host, at, summary FROM `{p}apply_log`\nWHERE spec_hash = ? ORDER BY generation DESC LIMIT 1"

	// qLastApply reads the latest apply record.
	qLastApply = "SELECT generation, spec_hash, host, at, summary FROM `{p}apply_log` ORDER BY generation DESC LIMIT 1"
)

// inventoryChunk is how many inventory rows one multi-row statement writes
// (8 parameters each; specs are small JSON documents).
const inventoryChunk = 500

// TryLockApply takes the apply lock for owner for ttl of backend time: when
// it is absent, expired or already owner's (a renewal).
func (s *Store) TryLockApply(ctx context.Context, owner string, ttl time.Duration) (func(context.Context) error, error) {
	if owner == "" {
		return nil, errors.New("lock apply: empty owner")
	}
	us, err := leaseMicros(ttl)
	if err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	err = s.write(ctx, func(c conn) error {
		n, err := affected(c.exec(ctx, qLockTake, owner, us, owner))
		if err != nil || n == 1 {
			return err
		}
		var holder string
		var exp int64
		err = c.row(ctx, qLockHolder).Scan(&holder, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := c.exec(ctx, qLockInsert, owner, us); err != nil {
				if isDup(err) {
					return errRetry
				}
				return err
			}
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("held by %q until %s: %w", holder, fromMicros(exp).Format(time.RFC3339), backends.ErrLocked)
	})
	if err != nil {
		return nil, fmt.Errorf("lock apply: %w", err)
	}
	unlock := func(ctx context.Context) error {
		err := s.write(ctx, func(c conn) error {
			_, err := c.exec(ctx, qLockRelease, owner)
			return err
		})
		if err != nil {
			return fmt.Errorf("unlock apply: %w", err)
		}
		return nil
	}
	return unlock, nil
}

// CommitApply writes the inventory changes and a new apply record in one
// transaction, only while owner holds the apply lock. Entries are written
// in multi-row statements of inventoryChunk rows.
func (s *Store) CommitApply(ctx context.Context, owner string, rec backends.ApplyRecord, put []backends.InventoryEntry, remove []spec.Address) (int64, error) {
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
	var gen int64
	err := s.write(ctx, func(c conn) error {
		err := c.row(ctx, qLockHeld, owner).Scan(new(int))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("apply lock not held by %q: %w", owner, backends.ErrLost)
		}
		if err != nil {
			return err
		}
		var at int64
		if err := c.row(ctx, qNextGeneration).Scan(&gen, &at); err != nil {
			return err
		}
		for _, ch := range chunks(putArgs, inventoryChunk) {
			args := make([]any, 0, 8*len(ch))
			for _, a := range ch {
				a[7] = gen
				args = append(args, a...)
			}
			q := qInventoryPutHead + tuples(qInventoryPutRow, len(ch)) + qInventoryPutTail
			if _, err := c.exec(ctx, q, args...); err != nil {
				return fmt.Errorf("write inventory: %w", err)
			}
		}
		for _, ch := range chunks(remove, inventoryChunk) {
			args := make([]any, 0, 2*len(ch))
			for _, a := range ch {
				args = append(args, string(a.Kind), a.Name)
			}
			q := qInventoryDeleteHead + tuples(qInventoryDeleteRow, len(ch)) + ")"
			if _, err := c.exec(ctx, q, args...); err != nil {
				return fmt.Errorf("remove inventory: %w", err)
			}
		}
		_, err = c.exec(ctx, qApplyRecord, gen, rec.SpecHash, rec.Host, at, rec.Summary)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("commit apply: %w", err)
	}
	return gen, nil
}

// LoadState reads the inventory and the last apply record in one snapshot.
// A store that was never migrated reads as empty.
func (s *Store) LoadState(ctx context.Context) (backends.State, error) {
	var st backends.State
	_, err := s.read(ctx, func(c conn) error {
		st = backends.State{}
		rows, err := c.query(ctx, qInventory)
		if err != nil {
			return err
		}
		for rows.Next() {
			var e backends.InventoryEntry
			var kind, specJSON string
			var prev sql.NullString
			if err := rows.Scan(&kind, &e.Address.Name, &e.Backend, &e.BackendType, &specJSON, &e.Status, &prev, &e.Generation); err != nil {
				rows.Close()
				return err
			}
			e.Address.Kind = spec.Kind(kind)
			if specJSON != "" {
				e.Spec = json.RawMessage(specJSON)
			}
			if prev.Valid {
				e.Previous = new(backends.Placement)
				if err := json.Unmarshal([]byte(prev.String), e.Previous); err != nil {
					rows.Close()
					return fmt.Errorf("%s previous: %w", e.Address, err)
				}
			}
			st.Entries = append(st.Entries, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var r backends.ApplyRecord
		var at int64
		err = c.row(ctx, qLastApply).Scan(&r.Generation, &r.SpecHash, &r.Host, &at, &r.Summary)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		r.At = fromMicros(at)
		st.Last = &r
		return nil
	})
	if err != nil {
		return backends.State{}, fmt.Errorf("load state: %w", err)
	}
	return st, nil
}

// FindApply returns the latest apply record of specHash.
func (s *Store) FindApply(ctx context.Context, specHash string) (backends.ApplyRecord, error) {
	var r backends.ApplyRecord
	found := false
	_, err := s.read(ctx, func(c conn) error {
		var at int64
		err := c.row(ctx, qFindApply, specHash).Scan(&r.Generation, &r.SpecHash, &r.Host, &at, &r.Summary)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		r.At, found = fromMicros(at), true
		return nil
	})
	if err != nil {
		return backends.ApplyRecord{}, fmt.Errorf("find apply: %w", err)
	}
	if !found {
		return backends.ApplyRecord{}, fmt.Errorf("spec hash %.12s: %w", specHash, backends.ErrNotFound)
	}
	return r, nil
}
