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
	t.Run("SetNextExec", func(t *testing.T) {
		t.Parallel()
		b, open := fresh(t, h)
		c := cronsOf(t, b)
		ctx := t.Context()
		def := cronDef(7)
		at := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
		later := at.Add(time.Hour)
		set := func(c backends.Crons, from, to time.Time, want bool, what string) {
			t.Helper()
			got, err := c.SetNextExec(ctx, "after", from, to)
			ok(t, err, what)
			if got != want {
				t.Fatalf("%s: set %v, want %v", what, got, want)
			}
		}
		set(c, time.Time{}, at, false, "set on an absent task")
		ok(t, c.PutCron(ctx, "after", def, time.Time{}, true), "put with no next")
		set(c, at, later, false, "set from a time it does not hold")
		wantCron(t, c, "after", def, time.Time{})
		set(c, time.Time{}, at, true, "arm from none")
		wantCron(t, c, "after", def, at)
		set(c, time.Time{}, later, false, "arm again from none")
		set(c, later, time.Time{}, false, "clear from a time it does not hold")
		wantCron(t, c, "after", def, at)
		set(c, at, later, true, "move")
		set(c, later, time.Time{}, true, "clear")
		wantCron(t, c, "after", def, time.Time{})
		_, err := c.SetNextExec(ctx, "after", at, at)
		if err == nil {
			t.Fatal("set from a time to the same time: no error")
		}

		// Two handles arming from none at once: exactly one does.
		handles := []backends.Crons{c, cronsOf(t, open()), cronsOf(t, open()), cronsOf(t, open())}
		won := make(chan bool, len(handles))
		for i, hc := range handles {
			go func() {
				got, err := hc.SetNextExec(ctx, "after", time.Time{}, at.Add(time.Duration(i)*time.Second))
				if err != nil {
					t.Errorf("concurrent arm %d: %v", i, err)
				}
				won <- got
			}()
		}
		wins := 0
		for range handles {
			if <-won {
				wins++
			}
		}
		if wins != 1 {
			t.Fatalf("%d of %d concurrent arms from none succeeded, want 1", wins, len(handles))
		}
		// A definition-only put keeps the armed time.
		ok(t, c.PutCron(ctx, "after", cronDef(8), time.Time{}, false), "put def only")
		m, err := c.ObserveCrons(ctx, []string{"after"})
		ok(t, err, "observe")
		if m["after"] == nil || m["after"].NextExec.IsZero() {
			t.Fatalf("after a definition-only put: %+v, want the armed time kept", m["after"])
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
