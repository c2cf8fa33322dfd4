package backendtest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
)

// testCronAdmin checks reconcile's view of cron tasks.
func testCronAdmin(t *testing.T, h Harness) {
	t.Run("PutObserve", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		c := cronsOf(t, b)
		ctx := t.Context()
		def1 := json.RawMessage(`{"schedule":"0 4 * * *","timezone":"Asia/Tokyo","command":{"argv":["true"]}}`)
		def2 := json.RawMessage(`{"schedule":"*/5 * * * *","timezone":"UTC","command":{"shell":"echo hi"}}`)
		next1 := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
		next2 := next1.Add(90 * time.Minute)

		ok(t, c.PutCron(ctx, "nightly", def1, next1, true), "put new")
		wantCron(t, c, "nightly", def1, next1)
		ok(t, c.PutCron(ctx, "nightly", def2, next2, false), "put def only")
		wantCron(t, c, "nightly", def2, next1)
		ok(t, c.PutCron(ctx, "nightly", def2, next2, true), "put with reset")
		wantCron(t, c, "nightly", def2, next2)
		ok(t, c.PutCron(ctx, "nightly", def2, time.Time{}, true), "put with no next")
		wantCron(t, c, "nightly", def2, time.Time{})
	})
	t.Run("ObserveMany", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		c := cronsOf(t, b)
		ctx := t.Context()
		base := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
		var names []string
		for i := range 100 {
			n := fmt.Sprintf("task-%03d", i)
			if i%10 == 3 {
				n = fmt.Sprintf(`it's "%d"; DROP TABLE x; -- {k}:* ünï`, i)
			}
			names = append(names, n)
			if i%2 == 0 {
				ok(t, c.PutCron(ctx, n, cronDef(i), base.Add(time.Duration(i)*time.Minute), true), "put "+n)
			}
		}
		m, err := c.ObserveCrons(ctx, names)
		ok(t, err, "observe many")
		if len(m) != 50 {
			t.Fatalf("observed %d tasks, want 50", len(m))
		}
		for i, n := range names {
			st := m[n]
			switch {
			case i%2 == 1 && st != nil:
				t.Errorf("absent %s observed as %+v", n, st)
			case i%2 == 0 && (st == nil || st.Name != n || !jsonEqual(st.Def, cronDef(i)) ||
				!st.NextExec.Equal(base.Add(time.Duration(i)*time.Minute)) || st.Running != 0):
				t.Errorf("%s observed as %+v", n, st)
			}
		}
		m, err = c.ObserveCrons(ctx, nil)
		ok(t, err, "observe none")
		if len(m) != 0 {
			t.Errorf("observe of no names returned %d", len(m))
		}
	})
	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		c := cronsOf(t, b)
		ctx := t.Context()
		next := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		ok(t, c.PutCron(ctx, "a", cronDef(1), next, true), "put a")
		ok(t, c.PutCron(ctx, "b", cronDef(2), next, true), "put b")
		ok(t, c.DeleteCron(ctx, "a"), "delete a")
		m, err := c.ObserveCrons(ctx, []string{"a", "b"})
		ok(t, err, "observe")
		if m["a"] != nil || m["b"] == nil {
			t.Fatalf("after deleting a: observed %v, want only b", m)
		}
		ok(t, c.DeleteCron(ctx, "a"), "delete a again")
		ok(t, c.DeleteCron(ctx, "never"), "delete an absent task")
	})
}

func cronDef(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"schedule":"%d * * * *","command":{"argv":["job","%d"]}}`, i%60, i))
}

// wantCron checks one observed task.
func wantCron(t *testing.T, c backends.Crons, name string, def json.RawMessage, next time.Time) {
	t.Helper()
	m, err := c.ObserveCrons(t.Context(), []string{name})
	ok(t, err, "observe "+name)
	st := m[name]
	if st == nil {
		t.Fatalf("task %s is absent", name)
	}
	if st.Name != name || !jsonEqual(st.Def, def) || !st.NextExec.Equal(next) || st.Running != 0 {
		t.Fatalf("task %s observed as {name %s def %s next %v running %d}, want def %s next %v running 0",
			name, st.Name, st.Def, st.NextExec, st.Running, def, next)
	}
	if !st.NextExec.IsZero() && st.NextExec.Location() != time.UTC {
		t.Errorf("task %s: NextExec %v is not UTC", name, st.NextExec)
	}
}
