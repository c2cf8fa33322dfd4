package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/backends"
)

// The notices table records which failure events were notified (one row
// per backends.NoticeKey), at the store's clock.
var (
	// qNoticeMark inserts a key unless it is present; a present row keeps
	// its first time.
	qNoticeMark = Query{
		SQL:   `INSERT INTO {p}notices (id, marked_at, keep) VALUES (?, {now}, ?) ON CONFLICT (id) DO NOTHING`,
		MySQL: `INSERT INTO {p}notices (id, marked_at, keep) VALUES (?, {now}, ?) ON DUPLICATE KEY UPDATE id = id`,
	}
	// qNoticesRead reads the recorded keys of a list.
	qNoticesRead = Query{SQL: `SELECT id, marked_at FROM {p}notices WHERE id {in}`}
	// qNoticesPrune deletes the rows older than ? µs but the kept ones
	// (notices_marked_at).
	qNoticesPrune = Query{SQL: `DELETE FROM {p}notices WHERE marked_at < {now} - ? AND keep = 0`}
)

// MarkNotice records id unless it is recorded and returns its first time.
func (s *Core) MarkNotice(ctx context.Context, id string) (time.Time, error) {
	key := backends.NoticeKey(id)
	keep := 0
	if strings.HasPrefix(id, backends.NoticeKeep) {
		keep = 1
	}
	if _, err := s.DB.WriteOne(ctx, s.DB.Dialect().Text(qNoticeMark), key, keep); err != nil {
		return time.Time{}, fmt.Errorf("mark notice: %w", err)
	}
	m, err := s.NoticesMarked(ctx, []string{id})
	if err != nil {
		return time.Time{}, err
	}
	at, ok := m[id]
	if !ok {
		return time.Time{}, fmt.Errorf("mark notice: the record is missing after it was written")
	}
	return at, nil
}

// NoticesMarked returns the recorded ones among ids.
func (s *Core) NoticesMarked(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	byKey := make(map[string]string, len(ids))
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		k := backends.NoticeKey(id)
		if _, dup := byKey[k]; !dup {
			keys = append(keys, k)
		}
		byKey[k] = id
	}
	d := s.DB.Dialect()
	lists := ListChunks(d, keys)
	_, err := s.readLists(ctx, len(lists), func(c Conn) error {
		clear(out)
		for _, l := range lists {
			rows, err := QueryIn(ctx, c, d, qNoticesRead, l)
			if err != nil {
				return err
			}
			for rows.Next() {
				var k string
				var us int64
				if err := rows.Scan(&k, &us); err != nil {
					rows.Close()
					return err
				}
				out[byKey[k]] = FromMicros(us)
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
		return nil, fmt.Errorf("read notices: %w", err)
	}
	return out, nil
}

// PruneNotices deletes the rows older than olderThan of store time.
func (s *Core) PruneNotices(ctx context.Context, olderThan time.Duration) (int, error) {
	n, err := Affected(s.DB.WriteOne(ctx, s.DB.Dialect().Text(qNoticesPrune), olderThan.Microseconds()))
	if err != nil {
		return 0, fmt.Errorf("prune notices: %w", err)
	}
	return int(n), nil
}
