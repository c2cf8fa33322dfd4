package backendtest

import (
	"slices"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// testBackend checks what every backend has: identity, clock, counter.
func testBackend(t *testing.T, h Harness) {
	t.Run("Identity", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		if b.Name() == "" {
			t.Error("Name is empty")
		}
		types := []string{spec.TypeSQLite, spec.TypeMySQL, spec.TypePostgres, spec.TypeRedis, spec.TypeMemcached}
		if !slices.Contains(types, b.Type()) {
			t.Errorf("Type = %q, want one of %v", b.Type(), types)
		}
	})
	t.Run("Clock", func(t *testing.T) {
		t.Parallel()
		b, _ := fresh(t, h)
		ctx := t.Context()
		before := b.RoundTrips()
		t1, err := b.Now(ctx)
		ok(t, err, "now")
		if b.RoundTrips() <= before {
			t.Errorf("RoundTrips = %d after Now, was %d: want an increase", b.RoundTrips(), before)
		}
		t2, err := b.Now(ctx)
		ok(t, err, "second now")
		if t1.IsZero() {
			t.Fatal("Now returned the zero time")
		}
		if t1.Location() != time.UTC || t2.Location() != time.UTC {
			t.Errorf("Now locations = %v, %v, want UTC", t1.Location(), t2.Location())
		}
		if t2.Before(t1) {
			t.Errorf("second Now %v is before first %v", t2, t1)
		}
		// A sanity bound, not a timing assertion: it catches unit mistakes
		// (seconds for microseconds), which are off by years.
		if d := time.Since(t1); d > 24*time.Hour || d < -24*time.Hour {
			t.Errorf("Now = %v, host clock %v: off by %v", t1, time.Now(), d)
		}
	})
}

// testMigrator checks numbered migrations.
func testMigrator(t *testing.T, h Harness) {
	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		open := h.New(t)
		b := open()
		m := as[backends.Migrator](t, b)
		ctx := t.Context()
		info, err := m.Schema(ctx)
		ok(t, err, "schema before migrate")
		if info.Version != 0 {
			t.Errorf("fresh store: Version = %d, want 0", info.Version)
		}
		if info.Latest < 1 {
			t.Errorf("fresh store: Latest = %d, want at least 1", info.Latest)
		}
		ok(t, m.Migrate(ctx), "migrate")
		ok(t, m.Migrate(ctx), "migrate again")
		after, err := m.Schema(ctx)
		ok(t, err, "schema after migrate")
		if after.Version != after.Latest || after.Latest != info.Latest {
			t.Errorf("after migrate: %+v, want Version == Latest == %d", after, info.Latest)
		}
		if after.MinBinary == "" {
			t.Error("after migrate: MinBinary is empty")
		}
		other, err := as[backends.Migrator](t, open()).Schema(ctx)
		ok(t, err, "schema from a second handle")
		if other != after {
			t.Errorf("second handle: %+v, want %+v", other, after)
		}
	})
}
