package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Promises of docs/spec.md that no other test holds to: each test names
// the sentence it checks.

// TestPromiseEmptyOrNullSections: "Each may be empty or null", the
// backends and cluster sections included.
func TestPromiseEmptyOrNullSections(t *testing.T) {
	for _, src := range []string{
		"backends:\ncluster:\nsemaphores:\ncron:\nqueues:\n",
		"backends: {}\ncluster: {}\nsemaphores: {}\ncron: {}\nqueues: {}\n",
		"backends: ~\ncluster: null\n",
	} {
		s := mustLoad(t, one(src), LoadOptions{})
		checkInvariants(t, s)
		if len(s.Addresses()) != 0 || s.Cluster.Backend != DefaultBackendName {
			t.Errorf("%q: got %d objects, cluster backend %q", src, len(s.Addresses()), s.Cluster.Backend)
		}
	}
}

// TestPromiseExplicitEmbedded: "`backend: embedded` may be written
// explicitly in that case" (no backend declared).
func TestPromiseExplicitEmbedded(t *testing.T) {
	s := mustLoad(t, one("semaphores:\n  s: {backend: embedded, limit: 1}\ncluster: {backend: embedded}\n"), LoadOptions{})
	if s.Semaphores["s"].Backend != DefaultBackendName || s.Cluster.Backend != DefaultBackendName {
		t.Errorf("semaphore backend %q, cluster %q", s.Semaphores["s"].Backend, s.Cluster.Backend)
	}
}

// TestPromiseStringIsNotAnInteger: "Integers are YAML integers; "5" (a
// string) is an error."
func TestPromiseStringIsNotAnInteger(t *testing.T) {
	for _, src := range []string{
		"semaphores:\n  s: {limit: \"5\"}\n",
		"queues:\n  q: {partitions: \"4\"}\n",
		"cron:\n  c: {schedule: \"@daily\", command: \"true\", max_attempts: \"2\"}\n",
	} {
		_, errs := loadStrings(t, one(src), LoadOptions{})
		if len(errs) != 1 || !strings.Contains(errs[0].Msg, "must be an integer, got string") {
			t.Errorf("%q: got %v, want one error \"must be an integer, got string\"", src, errs)
		}
	}
}

// TestPromiseSQLitePathNotEmpty: sqlite `path` "not empty".
func TestPromiseSQLitePathNotEmpty(t *testing.T) {
	_, errs := loadStrings(t, one("backends:\n  db: {type: sqlite, path: \"\"}\n"), LoadOptions{})
	if len(errs) != 1 || errs[0].Address != "backends.db.path" {
		t.Errorf("got %v, want one error of backends.db.path", errs)
	}
}

// TestPromiseKeyPrefixDefaults: redis and memcached `key_prefix` default
// to `coordd:`, mysql `table_prefix` to `coordd_`.
func TestPromiseKeyPrefixDefaults(t *testing.T) {
	s := mustLoad(t, one(`backends:
  db: {type: mysql, dsn: "u:p@tcp(h:3306)/d"}
  r: {type: redis, url: "redis://h:6379/0"}
  mc: {type: memcached, servers: ["mc1:11211"]}
cluster: {backend: db}
`), LoadOptions{})
	if got := s.Backends["r"].KeyPrefix; got != "coordd:" {
		t.Errorf("redis key_prefix = %q, want coordd:", got)
	}
	if got := s.Backends["mc"].KeyPrefix; got != "coordd:" {
		t.Errorf("memcached key_prefix = %q, want coordd:", got)
	}
	if got := s.Backends["db"].TablePrefix; got != "coordd_" {
		t.Errorf("mysql table_prefix = %q, want coordd_", got)
	}
}

// TestPromiseEnvDefaultLiteral: "The default is taken literally up to the
// first `}`": no nested expansion, `$$` and `${` inside it stay as written,
// and what follows the first `}` is outside the reference.
func TestPromiseEnvDefaultLiteral(t *testing.T) {
	s := mustLoad(t, one(`backends:
  r: {type: redis, url: "redis://h:6379/0", key_prefix: "${UNSET:-a$$b${c}d"}
`), LoadOptions{})
	if got := s.Backends["r"].KeyPrefix; got != "a$$b${cd" {
		t.Errorf("key_prefix = %q, want %q", got, "a$$b${cd")
	}
}

// TestPromiseScheduleExtraSpaces: "Extra spaces between fields are dropped
// when the spec is loaded", so two ways of writing one schedule are one
// spec (same hash) and the stored schedule reads as usual.
func TestPromiseScheduleExtraSpaces(t *testing.T) {
	spaced := mustLoad(t, one("cron:\n  c: {schedule: \"0  4 *   * *\", command: \"true\"}\n"), LoadOptions{})
	plain := mustLoad(t, one("cron:\n  c: {schedule: \"0 4 * * *\", command: \"true\"}\n"), LoadOptions{})
	if got := spaced.Cron["c"].Schedule; got != "0 4 * * *" {
		t.Errorf("schedule = %q, want %q", got, "0 4 * * *")
	}
	if spaced.Hash() != plain.Hash() {
		t.Errorf("extra spaces changed the spec hash")
	}
}

// TestPromiseLinksThatLeadNowhere: "so is a dangling link or a link loop"
// (an error at FILE:1:1), and "a subdirectory, or a link to one, is
// skipped".
func TestPromiseLinksThatLeadNowhere(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(t *testing.T, dir, path string)
	}{
		{"dangling", func(t *testing.T, dir, path string) {
			if err := os.Symlink(filepath.Join(dir, "missing.yaml"), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"loop", func(t *testing.T, dir, path string) {
			if err := os.Symlink(path, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSpec(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 1}\n")
			bad := filepath.Join(dir, "b.yaml")
			c.make(t, dir, bad)
			errs := loadWithin(t, dir)
			if len(errs) != 1 || errorAt(errs, bad) == nil {
				t.Errorf("Load(%s) = %v; want one error at %s:1:1", dir, errs, bad)
			}
		})
	}
	t.Run("link to a directory", func(t *testing.T) {
		dir := t.TempDir()
		writeSpec(t, filepath.Join(dir, "a.yaml"), "semaphores:\n  s: {limit: 1}\n")
		sub := filepath.Join(t.TempDir(), "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		writeSpec(t, filepath.Join(sub, "c.yaml"), "semaphores:\n  s: {limit: 0}\n")
		if err := os.Symlink(sub, filepath.Join(dir, "b.yaml")); err != nil {
			t.Fatal(err)
		}
		if errs := loadWithin(t, dir); errs != nil {
			t.Errorf("Load(%s) = %v; want the link to a directory skipped", dir, errs)
		}
	})
}
