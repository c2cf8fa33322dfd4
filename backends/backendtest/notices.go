package backendtest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testNotices checks the record of notified events: a mark is kept once at
// backend time, whichever handle marks it and however often, reads return
// only what was marked, ids are data of any length, and the prune deletes
// only old records that are not kept.
func testNotices(t *testing.T, h Harness) {
	t.Run("MarkOnce", func(t *testing.T) {
		b, open := fresh(t, h)
		n := clusterOf(t, b)
		before, err := b.Now(t.Context())
		ok(t, err, "now")
		at, err := n.MarkNotice(t.Context(), "cron/report/1")
		ok(t, err, "mark")
		after, err := b.Now(t.Context())
		ok(t, err, "now")
		if at.Before(before.Add(-time.Millisecond)) || at.After(after.Add(time.Millisecond)) || at.Location() != time.UTC {
			t.Fatalf("mark time %v, want backend time in UTC between %v and %v", at, before, after)
		}
		other := clusterOf(t, open())
		again, err := other.MarkNotice(t.Context(), "cron/report/1")
		ok(t, err, "mark again")
		if !again.Equal(at) {
			t.Fatalf("a second mark from another handle moved the time: %v, first %v", again, at)
		}
		got, err := other.NoticesMarked(t.Context(), []string{"cron/report/1", "cron/report/2"})
		ok(t, err, "read")
		if len(got) != 1 || !got["cron/report/1"].Equal(at) {
			t.Fatalf("marked = %v, want only cron/report/1 at %v", got, at)
		}
		none, err := n.NoticesMarked(t.Context(), nil)
		ok(t, err, "read none")
		if len(none) != 0 {
			t.Fatalf("read of no ids = %v", none)
		}
	})
	t.Run("ConcurrentMarks", func(t *testing.T) {
		_, open := fresh(t, h)
		const handles = 4
		times := make([]time.Time, handles)
		var wg sync.WaitGroup
		for i := range handles {
			c := clusterOf(t, open())
			wg.Go(func() {
				at, err := c.MarkNotice(t.Context(), "queue/q/7")
				if err != nil {
					t.Errorf("mark: %v", err)
				}
				times[i] = at
			})
		}
		wg.Wait()
		for i := range times {
			if !times[i].Equal(times[0]) {
				t.Fatalf("concurrent marks disagree on the first time: %v", times)
			}
		}
	})
	t.Run("IDsAreData", func(t *testing.T) {
		b, _ := fresh(t, h)
		n := clusterOf(t, b)
		ids := []string{strings.Repeat("x", 5000), "a'b\"c;--", "ünï\x00code", "", "% _ *"}
		for _, id := range ids {
			_, err := n.MarkNotice(t.Context(), id)
			ok(t, err, "mark "+id[:min(len(id), 10)])
		}
		got, err := n.NoticesMarked(t.Context(), append(ids, "absent", "a'b"))
		ok(t, err, "read")
		if len(got) != len(ids) {
			t.Fatalf("read %d of %d marked ids: %v", len(got), len(ids), got)
		}
		for _, id := range ids {
			if _, found := got[id]; !found {
				t.Fatalf("id %q not read back", id[:min(len(id), 10)])
			}
		}
	})
	t.Run("Prune", func(t *testing.T) {
		b, _ := fresh(t, h)
		n := clusterOf(t, b)
		_, err := n.MarkNotice(t.Context(), "old")
		ok(t, err, "mark old")
		kept, err := n.MarkNotice(t.Context(), backends.NoticeKeep+"old")
		ok(t, err, "mark kept")
		time.Sleep(300 * time.Millisecond)
		_, err = n.MarkNotice(t.Context(), "new")
		ok(t, err, "mark new")
		k, err := n.PruneNotices(t.Context(), 150*time.Millisecond)
		ok(t, err, "prune")
		got, err := n.NoticesMarked(t.Context(), []string{"old", "new", backends.NoticeKeep + "old"})
		ok(t, err, "read")
		if k != 1 || len(got) != 2 || got["new"].IsZero() || !got[backends.NoticeKeep+"old"].Equal(kept) {
			t.Fatalf("prune deleted %d, left %v; want the old one deleted, the new and the kept ones left", k, got)
		}
	})
}
