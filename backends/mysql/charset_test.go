package mysql_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	mysqldsn "github.com/coordd/coordd/backends/mysql/dsn"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/spec"
)

// injected is the table the hostile values below try to create.
const injected = "coordd_injected"

// hostile are values an attacker controls (a job key, a payload, a cron
// command's output): under a multibyte connection charset such as gbk,
// 0xbf 0x5c is one character (0x81 0x5c in sjis and cp932), so the
// backslash the driver puts before the quote is swallowed and the quote
// ends the string literal.
var hostile = [][]byte{
	[]byte("\xbf'; CREATE TABLE " + injected + " (i int); -- "),
	[]byte("\xbf\\'; CREATE TABLE " + injected + " (i int); -- "),
	[]byte("\xbf\"; CREATE TABLE " + injected + " (i int); -- "),
	[]byte("\x81'; CREATE TABLE " + injected + " (i int); -- "),
	[]byte("'\\\x00\n\r\x1a\"`%_\xff\xfe\xc0\x80\xed\xa0\x80\xf8\x88\x80\x80\x80"),
	// A valid key: quotes, backslashes, a multibyte character before a
	// quote.
	[]byte("\\'); CREATE TABLE " + injected + " (i int); -- \"é\\'"),
}

// withParam adds k=v to a DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// tableExists reports whether the test database holds the named table.
func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// feedHostile pushes jobs and finishes cron runs carrying the hostile
// values, through every store path that takes them, and returns the paths
// after which the injected table existed (it is dropped each time). Errors
// of the paths are ignored: the question is only whether SQL ran.
func feedHostile(t *testing.T, s *mysql.Store) []string {
	t.Helper()
	ctx := t.Context()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	cfg := backends.QueueConfig{Name: "q", Partitions: 2, VisibilityTimeout: time.Minute, MaxAttempts: 3,
		Unique: spec.UniquePending, MaxPayload: 1 << 20, Claim: spec.ClaimPartition}
	if _, err := s.PutQueue(ctx, cfg); err != nil {
		t.Fatalf("put queue: %v", err)
	}
	if err := s.PutCron(ctx, "c", []byte(`{"schedule":"@daily","command":{"argv":["true"]}}`), time.Now().Add(time.Hour), true); err != nil {
		t.Fatalf("put cron: %v", err)
	}
	var ran []string
	check := func(path string) {
		if tableExists(t, s.DB(), injected) {
			ran = append(ran, path)
			if _, err := s.DB().ExecContext(ctx, "DROP TABLE "+injected); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, v := range hostile {
		_, _ = s.Push(ctx, "q", backends.PushRequest{Key: string(v)})
		check(fmt.Sprintf("job key %d", i))
		_, _ = s.Push(ctx, "q", backends.PushRequest{Payload: v})
		check(fmt.Sprintf("job payload %d", i))
		occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "c", Attempt: 1, Owner: "o", Host: "h", Lease: time.Minute, Manual: true})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		_ = backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 1, Output: v})
		check(fmt.Sprintf("cron output %d", i))
	}
	return ran
}

// TestMultibyteCharsetRefused: a DSN asking for a charset whose multibyte
// characters can end in a backslash (gbk, big5, sjis, cp932, gb2312,
// gb18030), directly or as a session variable, is refused by Open. Before
// the rule Open accepted them all, and under gbk and big5 a cron command's
// output ran statements through the finish script.
func TestMultibyteCharsetRefused(t *testing.T) {
	for _, c := range []struct {
		param string
		want  error
	}{
		{"charset=gbk", mysqldsn.ErrUnsafeCharset},
		{"charset=utf8mb4,gbk", mysqldsn.ErrUnsafeCharset},
		{"charset=big5", mysqldsn.ErrUnsafeCharset},
		{"charset=sjis", mysqldsn.ErrUnsafeCharset},
		{"collation=gbk_chinese_ci", mysqldsn.ErrUnsafeCharset},
		{"character_set_client=gbk", mysqldsn.ErrUnsafeCharset},
		{"character_set_connection=cp932", mysqldsn.ErrUnsafeCharset},
		{"collation_connection=gbk_bin", mysqldsn.ErrUnsafeCharset},
		{"sql_mode='',character_set_client=gbk", mysqldsn.ErrSessionVariable},
	} {
		t.Run(c.param, func(t *testing.T) {
			dsn := testenv.MySQLDSN(t)
			s, err := mysql.Open(t.Context(), "cluster", withParam(dsn, c.param), "coordd_", backends.Options{Version: "0.1.0"})
			if err == nil {
				ran := feedHostile(t, s)
				s.Close()
				t.Fatalf("Open accepted %s; SQL in hostile values ran through: %v", c.param, ran)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open with %s: %v, want %v", c.param, err, c.want)
			}
		})
	}
}

// TestServerForcedCharsetRefused: a server that forces a multibyte charset
// on its clients (here init_connect, which applies to users without
// CONNECTION ADMIN) is refused at Open even though the DSN is clean. A
// private mariadbd, because init_connect is global.
func TestServerForcedCharsetRefused(t *testing.T) {
	ctx := t.Context()
	m := testenv.StartMariaDB(t)
	rootDSN := m.CreateDatabase(t)
	cfg, err := driver.ParseDSN(rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	root, err := sql.Open("mysql", rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE USER 'coordd'@'127.0.0.1'",
		"GRANT ALL ON `" + cfg.DBName + "`.* TO 'coordd'@'127.0.0.1'",
		"SET GLOBAL init_connect = 'SET NAMES gbk'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg.User = "coordd"
	s, err := mysql.Open(ctx, "cluster", cfg.FormatDSN(), "coordd_", backends.Options{Version: "0.1.0"})
	if err == nil {
		ran := feedHostile(t, s)
		s.Close()
		t.Fatalf("Open accepted a connection the server put in gbk; SQL in hostile values ran through: %v", ran)
	}
	if !errors.Is(err, mysqldsn.ErrUnsafeCharset) || !strings.Contains(err.Error(), "character_set_client to gbk") {
		t.Fatalf("Open = %v, want ErrUnsafeCharset naming character_set_client gbk", err)
	}
}

// TestHostileValuesAreData: under the safe charsets, quotes, backslashes,
// NULs and invalid UTF-8 in job keys, payloads, retry reasons and cron
// output are stored and read back byte for byte (or, for a key that breaks
// the key rule, refused), and never run as SQL.
func TestHostileValuesAreData(t *testing.T) {
	for _, param := range []string{"", "charset=utf8mb4", "charset=latin1"} {
		t.Run("dsn "+param, func(t *testing.T) {
			ctx := t.Context()
			dsn := testenv.MySQLDSN(t)
			if param != "" {
				dsn = withParam(dsn, param)
			}
			s := migrated(t, dsn, "coordd_")
			if ran := feedHostile(t, s); len(ran) > 0 {
				t.Fatalf("SQL in hostile values ran through %v", ran)
			}
			// feedHostile's jobs: drop them, then push each value once.
			if err := s.DeleteQueue(ctx, "q", true); err != nil {
				t.Fatal(err)
			}
			cfg := backends.QueueConfig{Name: "h", Partitions: 1, VisibilityTimeout: time.Minute, MaxAttempts: 3,
				Unique: spec.UniquePending, MaxPayload: 1 << 20, Claim: spec.ClaimPartition}
			if _, err := s.PutQueue(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			type pushed struct {
				key     string
				payload []byte
			}
			var want []pushed
			for i, v := range hostile {
				key := string(v)
				if _, err := s.Push(ctx, "h", backends.PushRequest{Key: key, Payload: v}); err != nil {
					if !errors.Is(err, spec.ErrInvalidKey) {
						t.Fatalf("push of key %d %q: %v, want success or ErrInvalidKey", i, key, err)
					}
					key = fmt.Sprintf("key-%d", i)
					if _, err := s.Push(ctx, "h", backends.PushRequest{Key: key, Payload: v}); err != nil {
						t.Fatalf("push of payload %d %q: %v", i, v, err)
					}
				}
				want = append(want, pushed{key, v})
			}
			// The unique check compares keys as data: a hostile key is a
			// duplicate of itself only.
			last := want[len(want)-1]
			if _, err := s.Push(ctx, "h", backends.PushRequest{Key: last.key}); !errors.Is(err, backends.ErrDuplicate) {
				t.Fatalf("second push of key %q: %v, want ErrDuplicate", last.key, err)
			}
			jobs, err := s.Claim(ctx, "h", "worker", len(want)+1)
			if err != nil || len(jobs) != len(want) {
				t.Fatalf("claim = %d jobs, %v; want %d", len(jobs), err, len(want))
			}
			for i, j := range jobs {
				if j.Key != want[i].key || !bytes.Equal(j.Payload, want[i].payload) {
					t.Fatalf("job %d read back as key %q payload %q, want %q and %q", i, j.Key, j.Payload, want[i].key, want[i].payload)
				}
			}
			// A retry reason is text: invalid UTF-8 (a rune cut by the
			// queue's length limit) is replaced, not a failed retry.
			if err := s.Retry(ctx, jobs[0], string(hostile[0])); err != nil {
				t.Fatalf("retry with a hostile reason: %v", err)
			}
			again, err := s.Claim(ctx, "h", "worker", 1)
			if want := strings.ToValidUTF8(string(hostile[0]), "\uFFFD"); err != nil || len(again) != 1 || again[0].LastError != want {
				t.Fatalf("claim after the retry = %+v, %v; want job %d with last error %q", again, err, jobs[0].ID, want)
			}

			var outs [][]byte
			for i, v := range hostile {
				occ, err := s.ClaimOccurrence(ctx, backends.ClaimRequest{Task: "c", Attempt: 1, Owner: "o", Host: "h", Lease: time.Minute, Manual: true})
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
				if err := backends.FinishOne(ctx, s, occ, backends.RunResult{Status: backends.RunFailed, ExitCode: 1, Error: string(v), Output: v}); err != nil {
					t.Fatalf("finish with output %d %q: %v", i, v, err)
				}
				outs = append([][]byte{v}, outs...)
			}
			runs, err := s.History(ctx, "c", 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range outs {
				if !bytes.Equal(runs[i].Output, v) {
					t.Fatalf("cron output read back as %q, want %q", runs[i].Output, v)
				}
				if want := strings.ToValidUTF8(string(v), "\uFFFD"); runs[i].Error != want {
					t.Fatalf("cron error read back as %q, want %q", runs[i].Error, want)
				}
			}
			if tableExists(t, s.DB(), injected) {
				t.Fatal("a hostile value created a table")
			}
		})
	}
}
