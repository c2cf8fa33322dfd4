package mysql_test

import (
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/internal/testenv"
)

// TestHostsOlderSchema: a store whose schema predates the hosts table (an
// older binary migrated it) lists no hosts instead of failing, so that
// `coordd status` works during a rolling upgrade.
func TestHostsOlderSchema(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	s := migrated(t, dsn, "old_")
	execSQL(t, s, "DROP TABLE `{p}hosts`")
	ro := openStore(t, dsn, "old_", backends.Options{ReadOnly: true, Version: "0.1.0"})
	hs, err := ro.ListHosts(t.Context())
	if err != nil || len(hs.Hosts) != 0 || hs.Now.IsZero() {
		t.Fatalf("list hosts without the table = %+v, %v; want none and the clock", hs, err)
	}
}
