package sqlite

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
	// qLockHolder reads the apply lock's owner, its expiry and whether it is
	// still live.
	qLockHolder = `SELECT owner, expires_at, expires_at > ` + nowSQL + ` FROM apply_lock WHERE id = 1`

	// qLockTake takes or renews the apply lock. The WHERE of the upsert
	// re-checks, against the same instant, that the lock is free, expired or
	// already ours, so a racing taker cannot overwrite a live lock.
	qLockTake = `INSERT INTO apply_lock (id, owner, expires_at) VALUES (1, ?1, ` + nowSQL + ` + ?2)
ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE apply_lock.owner = excluded.owner OR apply_lock.expires_at <= ` + nowSQL

	// qLockRelease deletes the apply lock only if owner holds it.
	qLockRelease = `DELETE FROM apply_lock WHERE id = 1 AND owner = ?`

	// qLockHeld is a row only while owner holds an unexpired apply lock.
	qLockHeld = `SELECT 1 FROM apply_lock WHERE id = 1 AND owner = ? AND expires_at > ` + nowSQL

	// qNextGeneration is one more than the last apply's generation, and the
	// instant the apply is recorded at.
	qNextGeneration = `SELECT coalesce(max(generation), 0) + 1, ` + nowSQL + ` FROM apply_log`

	// qInventoryPut writes one inventory entry.
	qInventoryPut = `INSERT INTO inventory (kind, name, backend, backend_type, spec, status, previous, generation)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, name) DO UPDATE SET backend = excluded.backend, backend_type = excluded.backend_type,
  spec = excluded.spec, status = excluded.status, previous = excluded.previous, generation = excluded.generation`

	// qInventoryDelete removes one inventory entry.
	qInventoryDelete = `DELETE FROM inventory WHERE kind = ? AND name = ?`

	// qApplyRecord appends one apply record.
	qApplyRecord = `INSERT INTO apply_log (generation, spec_hash, host, at, summary) VALUES (?, ?, ?, ?, ?)`

	// qInventory reads the inventory, sorted by kind then name.
	qInventory = `SELECT kind, name, backend, backend_type, spec, status, previous, generation
FROM inventory ORDER BY kind, name`

	// qFindApply reads the latest apply record of one spec hash.
	qFindApply = `SELECT generation, spec_hash, host, at, summary FROM apply_log
WHERE spec_hash = ? ORDER BY generation DESC LIMIT 1`

	// qLastApply reads the latest apply record.
	qLastApply = `SELECT generation, spec_hash, host, at, summary FROM apply_log ORDER BY generation DESC LIMIT 1`
)

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
		res, err := c.exec(ctx, qLockTake, owner, us)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var holder string
		var exp int64
		var live bool
		if err := c.row(ctx, qLockHolder).Scan(&holder, &exp, &live); err != nil {
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
// transaction, only while owner holds the apply lock.
func (s *Store) CommitApply(ctx context.Context, owner string, rec backends.ApplyRecord, put []backends.InventoryEntry, remove []spec.Address) (int64, error) {
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
		if len(put) > 0 {
			for _, e := range put {
				var prev sql.NullString
				if e.Previous != nil {
					b, err := json.Marshal(e.Previous)
					if err != nil {
						return fmt.Errorf("%s previous: %w", e.Address, err)
					}
					prev = sql.NullString{String: string(b), Valid: true}
				}
				if _, err := c.exec(ctx, qInventoryPut, string(e.Address.Kind), e.Address.Name, e.Backend, e.BackendType,
					string(e.Spec), e.Status, prev, gen); err != nil {
					return fmt.Errorf("%s: %w", e.Address, err)
				}
			}
		}
		if len(remove) > 0 {
			for _, a := range remove {
				if _, err := c.exec(ctx, qInventoryDelete, string(a.Kind), a.Name); err != nil {
					return fmt.Errorf("%s: %w", a, err)
				}
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
