package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
)

// withUmask runs the test under umask 022, the common default, so that the
// modes checked below are the ones a daemon would create.
func withUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
}

// modes returns the permission bits of the database file and its -wal and
// -shm files, failing when one is missing.
func modes(t *testing.T, path string) map[string]os.FileMode {
	t.Helper()
	out := map[string]os.FileMode{}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Fatalf("stat %s: %v", path+suffix, err)
		}
		out[suffix] = fi.Mode().Perm()
	}
	return out
}

// TestNewFilesArePrivate: a store's file, its -wal and its -shm hold owner
// tokens, payloads and command output, so a new store creates all three
// 0600 (SQLite alone makes them 0644).
func TestNewFilesArePrivate(t *testing.T) {
	withUmask(t)
	path := filepath.Join(t.TempDir(), "coordd.db")
	s, err := sqlite.Open(t.Context(), "t", path, backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for suffix, m := range modes(t, path) {
		if m != 0o600 {
			t.Errorf("%s%s has mode %o, want 600", filepath.Base(path), suffix, m)
		}
	}
}

// TestExistingFilesLoseOtherAccess: a store made by an older coordd (0644)
// keeps its group bits but loses access for others when it is opened.
func TestExistingFilesLoseOtherAccess(t *testing.T) {
	withUmask(t)
	path := filepath.Join(t.TempDir(), "coordd.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE x (i INTEGER)`); err != nil {
		t.Fatal(err)
	}
	defer db.Close() // keeps -wal and -shm in place while the store opens
	for suffix, m := range modes(t, path) {
		if m != 0o644 {
			t.Fatalf("setup: %s%s has mode %o, want SQLite's 644", filepath.Base(path), suffix, m)
		}
	}
	s, err := sqlite.Open(t.Context(), "t", path, backends.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for suffix, m := range modes(t, path) {
		if m != 0o640 {
			t.Errorf("%s%s has mode %o after Open, want 640", filepath.Base(path), suffix, m)
		}
	}
}
