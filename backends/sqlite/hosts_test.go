package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/backends"
)

// TestHostsOlderSchema: a file whose schema predates the hosts table (an
// older binary migrated it) lists no hosts instead of failing, so that
// `coordd status` works during a rolling upgrade.
func TestHostsOlderSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordd.db")
	s := migrated(t, path)
	execSQL(t, s, `DROP TABLE hosts`)
	ro := openStore(t, path, backends.Options{ReadOnly: true})
	hs, err := ro.ListHosts(t.Context())
	if err != nil || len(hs.Hosts) != 0 || hs.Now.IsZero() {
		t.Fatalf("list hosts without the table = %+v, %v; want none and the clock", hs, err)
	}
}
