package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
)

// Rate limits (backends.RateLimits): the rate_limits table holds each
// limit's config, rate_tats one row per limit and key with its theoretical
// arrival time (tat), the tat before the last write (prev) and the clock
// of that write (at), all in µs of the store's clock. A permit is one
// upsert that reads the config and the row, decides by the GCRA and writes
// in one statement under the row's lock; the TAT moves only when it
// grants, so the permit is granted exactly when tat differs from prev.
var (
	// qRatePut writes a limit's config. Arguments: name, count, per µs,
	// interval µs, burst, keyed.
	qRatePut = Query{
		SQL: `INSERT INTO {p}rate_limits (name, count, per_us, interval_us, burst, keyed) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET count = excluded.count, per_us = excluded.per_us, interval_us = excluded.interval_us, burst = excluded.burst, keyed = excluded.keyed`,
		MySQL: `INSERT INTO {p}rate_limits (name, count, per_us, interval_us, burst, keyed) VALUES (?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE count = VALUES(count), per_us = VALUES(per_us), interval_us = VALUES(interval_us), burst = VALUES(burst), keyed = VALUES(keyed)`,
	}
	// qRateDropUnkeyed and qRateDropKeyed delete the records that a change
	// of keyed leaves behind: the limit's own, or its keys'. Argument: name.
	qRateDropUnkeyed = Query{SQL: `DELETE FROM {p}rate_tats WHERE name = ? AND rkey = ''`}
	qRateDropKeyed   = Query{SQL: `DELETE FROM {p}rate_tats WHERE name = ? AND rkey <> ''`}
	// qRateDelete and qRateDeleteTats delete a limit and its records.
	// Argument: name.
	qRateDelete     = Query{SQL: `DELETE FROM {p}rate_limits WHERE name = ?`}
	qRateDeleteTats = Query{SQL: `DELETE FROM {p}rate_tats WHERE name = ?`}

	// qRateTake takes up to n permits. The SELECT yields a row only for a
	// limit of that name whose keyed matches, with its interval (iv) and
	// tolerance (tol, (burst - 1) × interval); a key without a record
	// inserts one granted min(n, burst) at once. An existing record is
	// updated under its row lock: with base = max(tat, now), permits are
	// due when base - now <= tol, (tol - (base - now)) / iv + 1 of them;
	// min(n, that) are granted and tat moves by iv for each; refused, tat
	// stays. prev takes the old tat either way. The inserted row carries
	// min(n, burst) as (tat - at) / iv to the update. {now} is one instant
	// for the whole statement. Arguments: key, n, n, name, keyed.
	qRateTake = Query{
		SQL: expandRate(`INSERT INTO {p}rate_tats AS t (name, rkey, tat, prev, at, iv, tol)
SELECT l.name, ?, {now} + (CASE WHEN ? < l.burst THEN ? ELSE l.burst END) * l.interval_us, 0, {now}, l.interval_us, (l.burst - 1) * l.interval_us
FROM {p}rate_limits l WHERE l.name = ? AND l.keyed = ?
ON CONFLICT (name, rkey) DO UPDATE SET prev = t.tat, at = excluded.at, iv = excluded.iv, tol = excluded.tol,
  tat = CASE WHEN BASE - excluded.at <= excluded.tol
    THEN BASE + excluded.iv * (CASE WHEN ASKED < DUE THEN ASKED ELSE DUE END) ELSE t.tat END
RETURNING tat, prev, at, iv, tol`, map[string]string{
			"BASE":  "(CASE WHEN t.tat > excluded.at THEN t.tat ELSE excluded.at END)",
			"ASKED": "((excluded.tat - excluded.at) / excluded.iv)",
			"DUE":   "((excluded.tol - (BASE - excluded.at)) / excluded.iv + 1)",
		}),
		// MySQL evaluates the assignments left to right: prev takes the
		// old tat first, and tat's expression reads it there. DIV is
		// integer division.
		MySQL: expandRate(`INSERT INTO {p}rate_tats (name, rkey, tat, prev, at, iv, tol)
SELECT l.name, ?, {now} + LEAST(?, ?, l.burst) * l.interval_us, 0, {now}, l.interval_us, (l.burst - 1) * l.interval_us
FROM {p}rate_limits l WHERE l.name = ? AND l.keyed = ?
ON DUPLICATE KEY UPDATE prev = tat,
  tat = IF(BASE - VALUES(at) <= VALUES(tol), BASE + VALUES(iv) * LEAST(ASKED, DUE), prev),
  at = VALUES(at), iv = VALUES(iv), tol = VALUES(tol)`, map[string]string{
			"BASE":  "GREATEST(prev, VALUES(at))",
			"ASKED": "((VALUES(tat) - VALUES(at)) DIV VALUES(iv))",
			"DUE":   "((VALUES(tol) - (BASE - VALUES(at))) DIV VALUES(iv) + 1)",
		}),
	}
	// qRateTakeRead reads back what qRateTake wrote, in its transaction
	// (MySQL has no RETURNING). Arguments: name, key.
	qRateTakeRead = Query{SQL: `SELECT tat, prev, at, iv, tol FROM {p}rate_tats WHERE name = ? AND rkey = ?`}

	// qRateConfig reads one limit's config. Argument: name.
	qRateConfig = Query{SQL: `SELECT name, count, per_us, burst, keyed FROM {p}rate_limits WHERE name = ?`}

	// qRateObserve reads limits with the store's clock, the unkeyed
	// record's tat and the number of keys not idle. Argument: names ({in}).
	qRateObserve = Query{SQL: `SELECT l.name, l.count, l.per_us, l.burst, l.keyed, {now},
  (SELECT t.tat FROM {p}rate_tats t WHERE t.name = l.name AND t.rkey = ''),
  (SELECT COUNT(*) FROM {p}rate_tats t WHERE t.name = l.name AND t.rkey <> '' AND t.tat > {now})
FROM {p}rate_limits l WHERE l.name {in}`}

	// qRatePrune deletes idle records: a tat in the past grants what no
	// record does (rate_tats_tat).
	qRatePrune = Query{SQL: `DELETE FROM {p}rate_tats WHERE tat < {now}`}
)

// expandRate writes out the named parts of a permit's statement (DUE
// holds BASE, so it goes first): the statement is long, its parts repeat.
func expandRate(text string, parts map[string]string) string {
	for _, k := range []string{"DUE", "ASKED", "BASE"} {
		text = strings.ReplaceAll(text, k, parts[k])
	}
	return text
}

// rateConfig builds a config from its stored columns.
func rateConfig(name string, count, perUS, burst int64, keyed bool) backends.RateLimitConfig {
	return backends.RateLimitConfig{Name: name, Count: int(count), Per: time.Duration(perUS) * time.Microsecond, Burst: int(burst), Keyed: keyed}
}

// PutRateLimit writes a limit's config and deletes the records a change of
// keyed left behind, in one transaction.
func (s *Core) PutRateLimit(ctx context.Context, cfg backends.RateLimitConfig) error {
	if err := backends.CheckRateLimit(cfg); err != nil {
		return err
	}
	d := s.DB.Dialect()
	drop := qRateDropKeyed
	if cfg.Keyed {
		drop = qRateDropUnkeyed
	}
	err := s.DB.Write(ctx, func(c Conn) error {
		if _, err := c.Exec(ctx, d.Text(qRatePut), cfg.Name, cfg.Count, cfg.Per.Microseconds(), cfg.Interval().Microseconds(), cfg.Burst, cfg.Keyed); err != nil {
			return err
		}
		_, err := c.Exec(ctx, d.Text(drop), cfg.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("put rate limit %q: %w", cfg.Name, err)
	}
	return nil
}

// DeleteRateLimit deletes a limit and its records.
func (s *Core) DeleteRateLimit(ctx context.Context, name string) error {
	d := s.DB.Dialect()
	err := s.DB.Write(ctx, func(c Conn) error {
		if _, err := c.Exec(ctx, d.Text(qRateDelete), name); err != nil {
			return err
		}
		_, err := c.Exec(ctx, d.Text(qRateDeleteTats), name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete rate limit %q: %w", name, err)
	}
	return nil
}

// TakePermit takes up to n permits of a limit by qRateTake: one statement on
// the Standard flavor, that statement and its read-back in one transaction
// on MySQL.
func (s *Core) TakePermit(ctx context.Context, name, key string, n int) (backends.Permit, error) {
	var p backends.Permit
	err := backends.CheckPermits(n)
	if err == nil {
		err = s.takePermit(ctx, name, key, n, &p)
	}
	if err != nil {
		return backends.Permit{}, fmt.Errorf("rate limit %q: take a permit: %w", name, err)
	}
	return p, nil
}

func (s *Core) takePermit(ctx context.Context, name, key string, n int, p *backends.Permit) error {
	if err := backends.CheckRateKey(backends.RateLimitConfig{Name: name, Keyed: key != ""}, key); err != nil {
		return err
	}
	d := s.DB.Dialect()
	var tat, prev, at, iv, tol int64
	found := true
	err := s.DB.Write(ctx, func(c Conn) error {
		found = true
		if d.Flavor == MySQL {
			rows, err := Affected(c.Exec(ctx, d.Text(qRateTake), key, n, n, name, key != ""))
			if err != nil {
				return err
			}
			if rows == 0 {
				found = false
				return nil
			}
			return c.QueryRow(ctx, d.Text(qRateTakeRead), name, key).Scan(&tat, &prev, &at, &iv, &tol)
		}
		err := c.QueryRow(ctx, d.Text(qRateTake), key, n, n, name, key != "").Scan(&tat, &prev, &at, &iv, &tol)
		if errors.Is(err, sql.ErrNoRows) {
			found = false
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !found {
		// Absent, or keyed the other way: read the config to say which.
		var cfg backends.RateLimitConfig
		_, err := s.DB.ReadOne(ctx, func(c Conn) (err error) {
			cfg, err = s.rateConfig(ctx, c, name)
			return err
		})
		if err != nil {
			return err
		}
		if cfg.Name == "" {
			return backends.ErrNotFound
		}
		if err := backends.CheckRateKey(cfg, key); err != nil {
			return err
		}
		return fmt.Errorf("the permit's statement matched no limit although one is stored")
	}
	*p = backends.PermitFrom(prev, tat, at, iv, tol)
	return nil
}

// rateConfig reads a limit's config; a zero config when it is absent.
func (s *Core) rateConfig(ctx context.Context, c Conn, name string) (backends.RateLimitConfig, error) {
	var n string
	var count, per, burst, keyed int64
	err := c.QueryRow(ctx, s.DB.Dialect().Text(qRateConfig), name).Scan(&n, &count, &per, &burst, &keyed)
	if errors.Is(err, sql.ErrNoRows) {
		return backends.RateLimitConfig{}, nil
	}
	if err != nil {
		return backends.RateLimitConfig{}, err
	}
	return rateConfig(n, count, per, burst, keyed != 0), nil
}

// ObserveRateLimits reads many limits in one read transaction.
func (s *Core) ObserveRateLimits(ctx context.Context, names []string) (map[string]*backends.RateLimitState, error) {
	out := map[string]*backends.RateLimitState{}
	if len(names) == 0 {
		return out, nil
	}
	d := s.DB.Dialect()
	lists := ListChunks(d, names)
	_, err := s.readLists(ctx, len(lists), func(c Conn) error {
		clear(out)
		for _, l := range lists {
			rows, err := QueryIn(ctx, c, d, qRateObserve, l)
			if err != nil {
				return err
			}
			for rows.Next() {
				var name string
				var count, per, burst, keyed, now, keys int64
				var tat sql.NullInt64
				if err := rows.Scan(&name, &count, &per, &burst, &keyed, &now, &tat, &keys); err != nil {
					rows.Close()
					return err
				}
				st := &backends.RateLimitState{Config: rateConfig(name, count, per, burst, keyed != 0), Keys: int(keys)}
				if !st.Config.Keyed {
					st.Available = st.Config.Available(tat.Int64, now)
				}
				out[name] = st
			}
			err = rows.Err()
			rows.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("observe rate limits: %w", err)
	}
	return out, nil
}

// PruneRateKeys deletes the idle records.
func (s *Core) PruneRateKeys(ctx context.Context) (int, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qRatePrune)))
	if err != nil {
		return 0, fmt.Errorf("prune rate limit records: %w", err)
	}
	return int(n), nil
}
