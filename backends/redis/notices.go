package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

// The record of notified events is a sorted set under the {global} hash
// tag: backends.NoticeKey -> µs of TIME at the first record (a score in µs
// since 1970, about 2^51, is exact in a double). Kept records
// (backends.NoticeKeep) are in a sorted set of their own, which the prune
// leaves alone.
func (k keys) notices() string     { return k.global("notices") }
func (k keys) keptNotices() string { return k.global("notices:kept") }

// noticesOf is the set that holds id's record.
func (k keys) noticesOf(id string) string {
	if strings.HasPrefix(id, backends.NoticeKeep) {
		return k.keptNotices()
	}
	return k.notices()
}

// noticeMarkScript adds a record unless it is there (lua/notice_mark.lua).
var noticeMarkScript = luaScript("notice_mark.lua")

// noticesPruneScript deletes old records (lua/notices_prune.lua).
var noticesPruneScript = luaScript("notices_prune.lua")

// MarkNotice records id unless it is recorded and returns its first time.
func (s *Store) MarkNotice(ctx context.Context, id string) (time.Time, error) {
	if err := s.writable(); err != nil {
		return time.Time{}, fmt.Errorf("mark notice: %w", err)
	}
	v, err := noticeMarkScript.Run(ctx, s.rdb, []string{s.keys.noticesOf(id)}, backends.NoticeKey(id)).Text()
	if err != nil {
		return time.Time{}, fmt.Errorf("mark notice: %w", err)
	}
	us, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("mark notice: unexpected reply %q", v)
	}
	return fromMicros(int64(us)), nil
}

// NoticesMarked returns the recorded ones among ids (one ZMSCORE).
func (s *Store) NoticesMarked(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	bySet := map[string][]string{}
	for _, id := range ids {
		set := s.keys.noticesOf(id)
		bySet[set] = append(bySet[set], id)
	}
	for set, list := range bySet {
		keys := make([]string, len(list))
		for i, id := range list {
			keys[i] = backends.NoticeKey(id)
		}
		scores, err := s.rdb.ZMScore(ctx, set, keys...).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, fmt.Errorf("read notices: %w", err)
		}
		for i, sc := range scores {
			if sc != 0 {
				out[list[i]] = fromMicros(int64(sc))
			}
		}
	}
	return out, nil
}

// PruneNotices deletes the records older than olderThan of server time.
func (s *Store) PruneNotices(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := s.writable(); err != nil {
		return 0, fmt.Errorf("prune notices: %w", err)
	}
	n, err := noticesPruneScript.Run(ctx, s.rdb, []string{s.keys.notices()}, usArg(olderThan.Microseconds())).Int()
	if err != nil {
		return 0, fmt.Errorf("prune notices: %w", err)
	}
	return n, nil
}
