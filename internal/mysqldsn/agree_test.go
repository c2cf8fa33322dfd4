package mysqldsn

import (
	"fmt"
	"maps"
	"net"
	"strings"
	"testing"

	driver "github.com/go-sql-driver/mysql"
)

// driverCorpus holds DSNs on every branch of the driver's parser: its
// structure, each kind of parameter, and values it refuses.
var driverCorpus = []string{
	"", "/", "x", "/db", "u:p@/db", "u:p@tcp(h:3306)/db", "u:p@tcp(h)/db", "u:p@tcp/db", "u@tcp()/db",
	"u@unix(/run/mysqld.sock)/db", "u@unix/db", "u@tcp4/db", "u@tcp6([::1]:3306)/db", "u@tcp6/db", "u@udp/db",
	"u@tcp(h:3306/db", "u@tcp(h:3306/x)y/db", "u@tcp(h:3306)", "u:p@ss@tcp(h)/db", "u:p/w@tcp(h)/db", "u:p?x@tcp(h)/db",
	"(/", "()/", "u@(h)/db", "@/db", ":@/db", "u@tcp(h)/d%20b", "u@tcp(h)/d%zz", "u@tcp(h)/d%zz?x=%zz",
	"u@tcp(h)/db?", "u@tcp(h)/db?&", "u@tcp(h)/db?a", "u@tcp(h)/db?a=", "u@tcp(h)/db?=a", "u@tcp(h)/db?a=1&a=2",
	"u@tcp(h)/db?parseTime=true", "u@tcp(h)/db?parseTime=True&interpolateParams=0", "u@tcp(h)/db?parseTime=yes",
	"u@tcp(h)/db?allowAllFiles=FALSE", "u@tcp(h)/db?compress=2", "u@tcp(h)/db?multiStatements=",
	"u@tcp(h)/db?clientFoundRows=1&columnsWithAlias=0&rejectReadOnly=true&checkConnLiveness=false",
	"u@tcp(h)/db?allowCleartextPasswords=1&allowFallbackToPlaintext=0&allowNativePasswords=1&allowOldPasswords=0",
	"u@tcp(h)/db?loc=UTC", "u@tcp(h)/db?loc=Local", "u@tcp(h)/db?loc=Europe%2FParis", "u@tcp(h)/db?loc=Mars",
	"u@tcp(h)/db?loc=%zz", "u@tcp(h)/db?timeout=5s", "u@tcp(h)/db?timeout=5", "u@tcp(h)/db?readTimeout=-1s",
	"u@tcp(h)/db?writeTimeout=1h2m", "u@tcp(h)/db?timeTruncate=1ms", "u@tcp(h)/db?timeTruncate=x",
	"u@tcp(h)/db?tls=true", "u@tcp(h)/db?tls=0", "u@tcp(h)/db?tls=SKIP-VERIFY", "u@tcp(h)/db?tls=preferred",
	"u@tcp(h)/db?tls=", "u@tcp(h)/db?tls=custom", "u@tcp(h)/db?tls=%zz", "u@tcp(h)/db?tls=skip%2Dverify",
	"u@tcp(h)/db?tls=%74rue", "u@tcp(h)/db?tls=custom&tls=false", "u@tcp(h)/db?serverPubKey=k",
	"u@tcp(h)/db?serverPubKey=", "u@tcp(h)/db?serverPubKey=%zz", "u@tcp(h)/db?maxAllowedPacket=0",
	"u@tcp(h)/db?maxAllowedPacket=-5", "u@tcp(h)/db?maxAllowedPacket=1e3", "u@tcp(h)/db?connectionAttributes=a:b,c:d",
	"u@tcp(h)/db?connectionAttributes=%zz", "u@tcp(h)/db?charset=utf8mb4&collation=utf8mb4_bin",
	"u@tcp(h)/db?collation=a&collation=b", "u@tcp(h)/db?sql_mode=%27ANSI%27&time_zone=%27%2B00%3A00%27",
	"u@tcp(h)/db?sql_mode=%zz", "u@tcp(h)/db?x=a%20b", "u@tcp(h)/db?strict=true", "u@tcp(h)/db?maxOpenConns=4",
}

// driverVerdict parses dsn with the driver; its panic (the strict
// parameter) counts as a refusal.
func driverVerdict(dsn string) (cfg *driver.Config, err error) {
	defer func() {
		if p := recover(); p != nil {
			cfg, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return driver.ParseDSN(dsn)
}

// agree fails t unless parseDriverDSN and the driver give dsn the same
// verdict, with the same message when they refuse it, and read the same
// network, address, collation and session variables when they accept it.
func agree(t *testing.T, dsn string) {
	t.Helper()
	ours, err := parseDriverDSN(dsn)
	theirs, derr := driverVerdict(dsn)
	switch {
	case err != nil && derr != nil:
		if err.Error() != derr.Error() && !(err == errStrict && strings.HasPrefix(derr.Error(), "panic: strict mode has been removed")) {
			t.Errorf("%q: refused as %q; the driver says %q", dsn, err, derr)
		}
	case err != nil || derr != nil:
		t.Errorf("%q: our error %v, the driver's %v", dsn, err, derr)
	default:
		addr := theirs.Addr == ours.addr || theirs.Addr == net.JoinHostPort(ours.addr, "3306") ||
			ours.addr == "" && (theirs.Addr == "127.0.0.1:3306" || theirs.Addr == "/tmp/mysql.sock")
		params := theirs.Params
		if params == nil {
			params = map[string]string{}
		}
		if theirs.Net != ours.net || !addr || theirs.Collation != ours.collation && ours.collation != "" || !maps.Equal(params, ours.params) {
			t.Errorf("%q: we read net %q addr %q collation %q session variables %v; the driver net %q addr %q collation %q %v",
				dsn, ours.net, ours.addr, ours.collation, ours.params, theirs.Net, theirs.Addr, theirs.Collation, params)
		}
	}
}

// TestAgreesWithDriver holds the spec's DSN check to the driver it stands
// in for: on every DSN of the corpus both accept, or both refuse with the
// same message.
func TestAgreesWithDriver(t *testing.T) {
	for _, dsn := range driverCorpus {
		agree(t, dsn)
	}
}

// FuzzAgreesWithDriver looks for a DSN on which the two parsers differ.
func FuzzAgreesWithDriver(f *testing.F) {
	for _, dsn := range driverCorpus {
		f.Add(dsn)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		agree(t, dsn)
	})
}
