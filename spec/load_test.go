package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testPassword = "s3cr3t-pw"

// testEnv provides COORDD_DB_PASSWORD and nothing else.
func testEnv(name string) (string, bool) {
	if name == "COORDD_DB_PASSWORD" {
		return testPassword, true
	}
	return "", false
}

func bytesOf(files map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(files))
	for n, c := range files {
		out[n] = []byte(c)
	}
	return out
}

func loadStrings(t *testing.T, files map[string]string, opts LoadOptions) (*Spec, Errors) {
	t.Helper()
	if opts.Getenv == nil {
		opts.Getenv = testEnv
	}
	if opts.DataDir == "" {
		opts.DataDir = "/data"
	}
	s, err := LoadFiles(bytesOf(files), opts)
	if err == nil {
		return s, nil
	}
	if s != nil {
		t.Errorf("got a spec along with an error")
	}
	errs, ok := err.(Errors)
	if !ok {
		t.Fatalf("error is %T, want Errors: %v", err, err)
	}
	return nil, errs
}

func mustLoad(t *testing.T, files map[string]string, opts LoadOptions) *Spec {
	t.Helper()
	s, errs := loadStrings(t, files, opts)
	if errs != nil {
		t.Fatalf("unexpected errors:\n%v", errs)
	}
	return s
}

func posString(p Pos) string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

func TestBadSpecs(t *testing.T) {
	if len(badCases) < 30 {
		t.Fatalf("only %d bad cases", len(badCases))
	}
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := loadStrings(t, tc.files, tc.opts)
			if errs == nil {
				t.Fatalf("loaded without error; want %s: %s", tc.pos, tc.msg)
			}
			want := tc.count
			if want == 0 {
				want = 1
			}
			if len(errs) != want {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), want, errs)
			}
			for _, e := range errs {
				if posString(e.Pos) == tc.pos && strings.Contains(e.Address+": "+e.Msg, tc.msg) {
					if !strings.HasPrefix(e.Error(), tc.pos+": ") {
						t.Errorf("Error() = %q, want prefix %q", e.Error(), tc.pos)
					}
					return
				}
			}
			t.Errorf("no error at %s containing %q; got:\n%v", tc.pos, tc.msg, errs)
		})
	}
}

func TestAllErrorsReportedInOrder(t *testing.T) {
	files := map[string]string{
		"b.yaml": "queues:\n  q: {partitions: 0, claim: nope}\n",
		"a.yaml": `semaphores:
  x: {limit: 0, lease: 5}
  Y: {limit: 1}
cron:
  c:
    schedule: "bad"
    command: []
    bogus: 1
`,
	}
	_, errs := loadStrings(t, files, LoadOptions{})
	want := []string{
		"a.yaml:2:14: semaphore.x.limit: must be at least 1, got 0",
		"a.yaml:2:24: semaphore.x.lease: must be a duration like 30s, got integer 5",
		"a.yaml:3:3: semaphores: invalid name",
		"a.yaml:6:15: cron.c.schedule: invalid cron expression",
		"a.yaml:7:14: cron.c.command: must not be empty",
		"a.yaml:8:5: cron.c: unknown field \"bogus\"",
		"b.yaml:2:19: queue.q.partitions: must be at least 1, got 0",
		"b.yaml:2:29: queue.q.claim: must be one of partition, skip_locked",
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, errs[i].Error(), w)
		}
	}
	lines := strings.Split(errs.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("Errors.Error() has %d lines, want %d", len(lines), len(want))
	}
	var one *Error
	if !errors.As(error(errs), &one) {
		t.Errorf("errors.As(*Error) failed")
	}
}

func TestBrokenFileDoesNotHideOthers(t *testing.T) {
	_, errs := loadStrings(t, map[string]string{
		"a.yaml": "semaphores: [\n",
		"b.yaml": "semaphores:\n  x: {limt: 1, limit: 1}\n",
	}, LoadOptions{})
	if len(errs) != 2 {
		t.Fatalf("got %d errors, want 2:\n%v", len(errs), errs)
	}
	if errs[0].Pos.File != "a.yaml" || !strings.Contains(errs[0].Msg, "invalid YAML") {
		t.Errorf("first error = %v", errs[0])
	}
	if errs[1].Pos.File != "b.yaml" || !strings.Contains(errs[1].Msg, `unknown field "limt"`) {
		t.Errorf("second error = %v", errs[1])
	}
}

func TestExampleLoads(t *testing.T) {
	s := mustLoad(t, one(exampleSpec), LoadOptions{})
	db := s.Backends["db"]
	if db == nil || db.Type != TypeMySQL || db.DSN != "coordd:"+testPassword+"@tcp(db1:3306)/coordd" || db.TablePrefix != "coordd_" {
		t.Errorf("db = %+v", db)
	}
	if db.Pos != (Pos{"a.yaml", 2, 3}) {
		t.Errorf("db.Pos = %+v", db.Pos)
	}
	cache := s.Backends["cache"]
	if cache == nil || cache.URL != "redis://cache1:6379/0" || cache.KeyPrefix != "coordd:" {
		t.Errorf("cache = %+v", cache)
	}
	if len(s.Backends) != 2 {
		t.Errorf("backends = %v", s.Backends)
	}
	if s.Cluster.Backend != "db" || s.Cluster.LeaderLease != 4*time.Second {
		t.Errorf("cluster = %+v", s.Cluster)
	}
	wantSems := map[string]Semaphore{
		"image-import":   {Name: "image-import", Backend: "cache", Limit: 5, Lease: 2 * time.Minute, Mode: ModeLease, Pos: Pos{"a.yaml", 8, 3}},
		"nightly-report": {Name: "nightly-report", Backend: "db", Limit: 1, Lease: time.Minute, Mode: ModeSession, Wake: WakePoll, Pos: Pos{"a.yaml", 9, 3}},
		"reindex":        {Name: "reindex", Backend: "cache", Limit: 1, Lease: time.Minute, Mode: ModeLease, MaxWaiting: intp(1), Pos: Pos{"a.yaml", 10, 3}},
	}
	for n, want := range wantSems {
		if got := s.Semaphores[n]; got == nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("semaphore %s = %+v, want %+v", n, got, want)
		}
	}
	c := s.Cron["nightly-report"]
	if c == nil {
		t.Fatal("cron task missing")
	}
	if c.Sched == nil {
		t.Fatal("Sched is nil")
	}
	c.Sched = nil
	wantCron := CronTask{
		Name: "nightly-report", Backend: "db", Schedule: "0 4 * * *", Timezone: "Asia/Tokyo",
		Command: Command{Argv: []string{"/usr/local/bin/report", "--daily"}}, Timeout: 30 * time.Minute,
		KillGrace: 10 * time.Second, CatchUp: CatchUpOnce, CatchUpLimit: 100, Overlap: OverlapForbid,
		MaxAttempts: 1, RetryBackoff: 30 * time.Second, OnHostLoss: HostLossRetry, Semaphore: "nightly-report",
		HistoryLimit: 100, RunLease: 30 * time.Second, Pos: Pos{"a.yaml", 12, 3},
	}
	if !reflect.DeepEqual(*c, wantCron) {
		t.Errorf("cron = %+v\nwant  %+v", *c, wantCron)
	}
	wantQ := Queue{
		Name: "thumbnails", Backend: "db", Partitions: 4, VisibilityTimeout: 5 * time.Minute, MaxAttempts: 5,
		RetryBackoff: 10 * time.Second, Unique: UniqueNone, MaxPayload: 1 << 20, Claim: ClaimPartition,
		Pos: Pos{"a.yaml", 19, 3},
	}
	if q := s.Queues["thumbnails"]; q == nil || !reflect.DeepEqual(*q, wantQ) {
		t.Errorf("queue = %+v\nwant  %+v", q, wantQ)
	}
	if !reflect.DeepEqual(s.Files, []string{"a.yaml"}) {
		t.Errorf("Files = %v", s.Files)
	}
	if s.ObjectCount() != 5 {
		t.Errorf("ObjectCount = %d", s.ObjectCount())
	}
	wantAddrs := []Address{
		{KindSemaphore, "image-import"}, {KindSemaphore, "nightly-report"}, {KindSemaphore, "reindex"},
		{KindCron, "nightly-report"}, {KindQueue, "thumbnails"},
	}
	if got := s.Addresses(); !reflect.DeepEqual(got, wantAddrs) {
		t.Errorf("Addresses = %v", got)
	}
	if b := s.BackendOf(Address{KindSemaphore, "reindex"}); b != cache {
		t.Errorf("BackendOf(reindex) = %v", b)
	}
	if b := s.BackendOf(Address{KindQueue, "thumbnails"}); b != db {
		t.Errorf("BackendOf(thumbnails) = %v", b)
	}
	if b := s.BackendOf(Address{KindQueue, "absent"}); b != nil {
		t.Errorf("BackendOf(absent) = %v", b)
	}
}

func intp(i int) *int { return &i }

func TestDefaults(t *testing.T) {
	s := mustLoad(t, one(`semaphores:
  s: {limit: 2}
cron:
  c: {schedule: "@hourly", command: "echo hi"}
queues:
  q: {}
rate_limits:
  r: {rate: 100/1m}
`), LoadOptions{})
	if r := s.RateLimits["r"]; r.Count != 100 || r.Per != time.Minute || r.Burst != 1 || r.Keyed || r.Backend != DefaultBackendName || r.Interval() != 600*time.Millisecond {
		t.Errorf("rate limit defaults = %+v", r)
	}
	sem := s.Semaphores["s"]
	if sem.Lease != 60*time.Second || sem.Mode != ModeLease || sem.Wake != "" || sem.MaxWaiting != nil || sem.MaxHold != 0 {
		t.Errorf("semaphore defaults = %+v", sem)
	}
	c := s.Cron["c"]
	if c.Timezone != "UTC" || c.Command.Shell != "echo hi" || c.Command.Argv != nil || c.Timeout != 0 ||
		c.KillGrace != 10*time.Second || c.CatchUp != CatchUpOnce || c.CatchUpLimit != 100 ||
		c.Overlap != OverlapForbid || c.MaxAttempts != 1 || c.RetryBackoff != 30*time.Second ||
		c.OnHostLoss != HostLossRetry || c.HistoryLimit != 100 || c.Env != nil || c.Sched == nil {
		t.Errorf("cron defaults = %+v", c)
	}
	q := s.Queues["q"]
	if q.Partitions != 4 || q.VisibilityTimeout != 5*time.Minute || q.MaxAttempts != 5 ||
		q.RetryBackoff != 10*time.Second || q.Timeout != 0 || q.Unique != UniqueNone ||
		q.MaxPayload != 1048576 || q.Claim != ClaimPartition {
		t.Errorf("queue defaults = %+v", q)
	}
}

func TestImplicitEmbeddedBackend(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "semaphores:\n  s: {limit: 1}\n"} {
		s := mustLoad(t, one(src), LoadOptions{DataDir: "/var/lib/x"})
		b := s.Backends[DefaultBackendName]
		want := Backend{Name: DefaultBackendName, Type: TypeSQLite, Path: "/var/lib/x/coordd.db", Implicit: true}
		if b == nil || !reflect.DeepEqual(*b, want) || len(s.Backends) != 1 {
			t.Errorf("%q: backends = %v", src, s.Backends)
		}
		if s.Cluster.Backend != DefaultBackendName || s.Cluster.LeaderLease != 4*time.Second {
			t.Errorf("%q: cluster = %+v", src, s.Cluster)
		}
		if s.Semaphores == nil || s.Cron == nil || s.Queues == nil {
			t.Errorf("%q: nil maps", src)
		}
		if sem := s.Semaphores["s"]; sem != nil && sem.Backend != DefaultBackendName {
			t.Errorf("semaphore backend = %q", sem.Backend)
		}
	}
}

func TestSingleBackendIsDefault(t *testing.T) {
	s := mustLoad(t, one(redisHeader+"queues:\n  q: {}\n"), LoadOptions{})
	if s.Cluster.Backend != "r" || s.Queues["q"].Backend != "r" {
		t.Errorf("cluster = %q, queue backend = %q", s.Cluster.Backend, s.Queues["q"].Backend)
	}
	if _, ok := s.Backends[DefaultBackendName]; ok {
		t.Error("implicit backend added although one is declared")
	}
}

// TestRedisDurable: durable: true on a redis backend states that it loses
// no acknowledged write; it is false unless declared.
func TestRedisDurable(t *testing.T) {
	s := mustLoad(t, one("backends:\n  r: {type: redis, url: \"redis://h:6379/0\", durable: true}\n  c: {type: redis, url: \"redis://h:6379/1\"}\ncluster: {backend: r}\n"), LoadOptions{})
	if !s.Backends["r"].Durable || s.Backends["c"].Durable {
		t.Errorf("durable: r %v, c %v; want true, false", s.Backends["r"].Durable, s.Backends["c"].Durable)
	}
}

func TestSQLitePaths(t *testing.T) {
	s := mustLoad(t, map[string]string{
		"/etc/coordd/conf.d/a.yaml": "backends:\n  rel: {type: sqlite, path: data/x.db}\n  abs: {type: sqlite, path: /srv/y.db}\n  def: {type: sqlite}\ncluster: {backend: rel}\n",
	}, LoadOptions{DataDir: "/var/lib/coordd"})
	want := map[string]string{"rel": "/etc/coordd/conf.d/data/x.db", "abs": "/srv/y.db", "def": "/var/lib/coordd/def.db"}
	for n, p := range want {
		if got := s.Backends[n].Path; got != p {
			t.Errorf("%s path = %q, want %q", n, got, p)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-backends.yaml", "backends:\n  db: {type: sqlite, path: state/db.sqlite}\n")
	write("20-sems.yml", "semaphores:\n  a: {limit: 1}\n")
	write("30-more.yaml", "semaphores:\n  b: {limit: 2}\ncron:\n  c: {schedule: \"@daily\", command: [\"true\"]}\n")
	write("README.txt", "not yaml: [")
	write(".hidden.yaml", "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir, LoadOptions{Getenv: testEnv, DataDir: "/data"})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{filepath.Join(dir, "10-backends.yaml"), filepath.Join(dir, "20-sems.yml"), filepath.Join(dir, "30-more.yaml")}
	if !reflect.DeepEqual(s.Files, wantFiles) {
		t.Errorf("Files = %v", s.Files)
	}
	if len(s.Semaphores) != 2 || len(s.Cron) != 1 || s.Semaphores["b"].Backend != "db" {
		t.Errorf("merged spec = %+v", s)
	}
	if got := s.Backends["db"].Path; got != filepath.Join(dir, "state/db.sqlite") {
		t.Errorf("path = %q", got)
	}
	if s.Semaphores["b"].Pos != (Pos{filepath.Join(dir, "30-more.yaml"), 2, 3}) {
		t.Errorf("pos = %+v", s.Semaphores["b"].Pos)
	}

	// Errors name dir/file.
	write("40-bad.yaml", "queues:\n  q: {partitions: 0}\n")
	_, err = Load(dir, LoadOptions{Getenv: testEnv})
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, "40-bad.yaml")+":2:19: ") {
		t.Errorf("err = %v", err)
	}

	// A single file works too.
	s, err = Load(filepath.Join(dir, "20-sems.yml"), LoadOptions{DataDir: "/data"})
	if err != nil || len(s.Semaphores) != 1 {
		t.Errorf("single file: %v, %v", s, err)
	}
}

func TestLoadPathErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.yaml")
	for path, msg := range map[string]string{
		missing: "cannot read spec: no such file or directory",
		dir:     "no *.yaml or *.yml files in directory",
	} {
		_, err := Load(path, LoadOptions{})
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 {
			t.Fatalf("%s: err = %v", path, err)
		}
		if errs[0].Pos != (Pos{path, 1, 1}) || !strings.Contains(errs[0].Msg, msg) {
			t.Errorf("%s: got %v", path, errs[0])
		}
	}
	if _, err := LoadFiles(nil, LoadOptions{}); err == nil {
		t.Error("LoadFiles(nil) succeeded")
	}
}

func TestEnvExpansion(t *testing.T) {
	env := map[string]string{"PW": "p@ss", "HOST": "db1", "EMPTY": ""}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	s := mustLoad(t, one(`backends:
  db: {type: mysql, dsn: "u:${PW}@tcp(${HOST}:${PORT:-3306})/${DB:-coordd}", table_prefix: "${PFX:-x_}"}
  r: {type: redis, url: "redis://${RHOST:-localhost}:6379/0", key_prefix: "a$$b${EMPTY:-def}$c"}
  mc: {type: memcached, servers: ["${HOST}:11211", "mc2:11211"]}
cluster: {backend: db}
cron:
  c: {schedule: "@daily", command: "echo ${PW}", env: {X: "${PW}"}}
`), LoadOptions{Getenv: getenv})
	if got := s.Backends["db"].DSN; got != "u:p@ss@tcp(db1:3306)/coordd" {
		t.Errorf("dsn = %q", got)
	}
	if got := s.Backends["db"].TablePrefix; got != "x_" {
		t.Errorf("table_prefix = %q", got)
	}
	if got := s.Backends["r"].URL; got != "redis://localhost:6379/0" {
		t.Errorf("url = %q", got)
	}
	if got := s.Backends["r"].KeyPrefix; got != "a$bdef$c" {
		t.Errorf("key_prefix = %q", got)
	}
	if got := s.Backends["mc"].Servers; !reflect.DeepEqual(got, []string{"db1:11211", "mc2:11211"}) {
		t.Errorf("servers = %q", got)
	}
	c := s.Cron["c"]
	if c.Command.Shell != "echo ${PW}" || c.Env["X"] != "${PW}" {
		t.Errorf("cron fields were expanded: %+v", c)
	}
}

func TestSkipEnv(t *testing.T) {
	src := one(`backends:
  db: {type: mysql, dsn: "coordd:${COORDD_DB_PASSWORD}@tcp(db1:3306)/coordd"}
  r: {type: redis, url: "${REDIS_URL}", key_prefix: "$$x"}
cluster: {backend: db}
`)
	none := func(string) (string, bool) { return "", false }
	s := mustLoad(t, src, LoadOptions{SkipEnv: true, Getenv: none})
	if got := s.Backends["db"].DSN; got != "coordd:${COORDD_DB_PASSWORD}@tcp(db1:3306)/coordd" {
		t.Errorf("dsn = %q", got)
	}
	if got := s.Backends["r"].KeyPrefix; got != "$x" {
		t.Errorf("key_prefix = %q", got)
	}
	// Without SkipEnv the same spec fails on both variables.
	_, errs := loadStrings(t, src, LoadOptions{Getenv: none})
	if len(errs) != 2 {
		t.Errorf("got %v", errs)
	}
	// Literal values are still checked with SkipEnv.
	_, errs = loadStrings(t, one("backends:\n  r: {type: redis, url: \"http://h/0\"}\n"), LoadOptions{SkipEnv: true})
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, "redis://") {
		t.Errorf("got %v", errs)
	}
}

func TestHash(t *testing.T) {
	base := mustLoad(t, one(exampleSpec), LoadOptions{})
	h := base.Hash()
	if len(h) != 64 {
		t.Fatalf("hash = %q", h)
	}
	// Same spec: block style, other key order, split over two files.
	split := map[string]string{
		"x/1.yaml": `queues:
  thumbnails:
    max_attempts: 5
    visibility_timeout: 5m
semaphores:
  reindex:
    max_waiting: 1
    limit: 1
    backend: cache
  nightly-report: {mode: session, limit: 1}
cluster: {leader_lease: 4s, backend: db}
`,
		"x/2.yaml": `# comment
cron:
  nightly-report:
    semaphore: nightly-report
    timeout: 30m
    command:
      - /usr/local/bin/report
      - --daily
    timezone: Asia/Tokyo
    schedule: "0   4 * * *"
semaphores:
  image-import: {lease: 2m, limit: 5, backend: cache}
backends:
  cache: {url: "redis://cache1:6379/0", type: redis}
  db: {dsn: "coordd:${COORDD_DB_PASSWORD}@tcp(db1:3306)/coordd", type: mysql}
`,
	}
	if got := mustLoad(t, split, LoadOptions{}).Hash(); got != h {
		t.Errorf("hash changed with formatting: %s != %s", got, h)
	}
	for i := 0; i < 5; i++ {
		if got := mustLoad(t, one(exampleSpec), LoadOptions{}).Hash(); got != h {
			t.Fatalf("hash not stable")
		}
	}
	// A password change does not change the hash (it is not hashed) ...
	other := func(string) (string, bool) { return "another", true }
	if got := mustLoad(t, one(exampleSpec), LoadOptions{Getenv: other}).Hash(); got != h {
		t.Errorf("hash depends on the password")
	}
	// ... but a limit does.
	changed := strings.Replace(exampleSpec, "limit: 5", "limit: 6", 1)
	if got := mustLoad(t, one(changed), LoadOptions{}).Hash(); got == h {
		t.Errorf("hash unchanged after a limit change")
	}
}

func TestRedact(t *testing.T) {
	dsns := map[string]string{
		"coordd:hunter2@tcp(db1:3306)/coordd":            "coordd:****@tcp(db1:3306)/coordd",
		"coordd:hun@ter/2@tcp(db1:3306)/coordd?tls=true": "coordd:****@tcp(db1:3306)/coordd?tls=true",
		"coordd@tcp(db1:3306)/coordd":                    "coordd@tcp(db1:3306)/coordd",
		"/coordd":                                        "/coordd",
		"u:hunter2@tcp(h:3306)":                          "u:****@tcp(h:3306)",
		"":                                               "",
	}
	for in, want := range dsns {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
	urls := map[string]string{
		"redis://:hunter2@cache1:6379/0":      "redis://:****@cache1:6379/0",
		"rediss://user:hunter2@cache1:6379/0": "rediss://user:****@cache1:6379/0",
		"redis://cache1:6379/0":               "redis://cache1:6379/0",
		"redis://user@cache1:6379/0":          "redis://user@cache1:6379/0",
		"redis://u:hun/ter2@cache1:6379/0":    "redis://u:****@cache1:6379/0",
		"redis://u:p%zz@h/0":                  "redis://u:****@h/0",
		"not a url":                           "not a url",
	}
	for in, want := range urls {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNoSecretInErrors(t *testing.T) {
	const pw = "hunter2xyz"
	env := func(k string) (string, bool) { return pw, k == "PW" }
	specs := []string{
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "@tcp(h:3306)\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:${PW}@tcp(h:3306)\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "/%zz@tcp(h:3306)\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "@tcp(h:3306)/d?tls=" + pw + "x\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "@tcp(h:3306)/d?parseTime=" + pw + "\"}\n",
		"backends:\n  db: {type: mysql, dsn: [\"u:" + pw + "@tcp(h:3306)/d\"]}\n",
		"backends:\n  db: {type: mysql, dsn: 12345" + "\n",
		"backends:\n  r: {type: redis, url: \"http://u:" + pw + "@h/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:" + pw + "@h:99999/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:" + pw + "@h:port/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:" + pw + "%zz@h/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:${PW}@/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:${PW}@h/x\", dsn: \"u:" + pw + "@tcp(h)/d\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:" + pw + "@h/${\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:" + pw + "@h/0\", key_prefix: \"${1" + pw + "}\"}\n",
		// A password holding "/", "#" or "?" splits the URL early: the
		// parser quoted a piece of it (`invalid port ":hunt" after host`).
		"backends:\n  r: {type: redis, url: \"redis://u:hunt/er2xyz@h:6379/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:hunt#er2xyz@h:6379/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://u:hunt?er2xyz@h:6379/0\"}\n",
		"backends:\n  r: {type: redis, url: \"redis://:hunt%zer2xyz@h:6379/0\"}\n",
		// Without the "@" after the password, the driver took
		// user:password for the network and printed it when dialing.
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "tcp(h:3306)/d\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:" + pw + "/d\"}\n",
		"backends:\n  db: {type: mysql, dsn: \"u:hunt/er2xyz?tls=hunt@tcp(h:3306)\"}\n",
	}
	for _, src := range specs {
		_, err := LoadFiles(map[string][]byte{"a.yaml": []byte(src)}, LoadOptions{Getenv: env, DataDir: "/d"})
		if err == nil {
			t.Errorf("%q loaded", src)
			continue
		}
		for _, piece := range []string{pw, "hunt", "er2xyz"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("error shows %q of the password:\n%v", piece, err)
			}
		}
	}
}

func TestDefaultDataDir(t *testing.T) {
	t.Setenv("COORDD_DATA_DIR", "/opt/coordd")
	t.Setenv("STATE_DIRECTORY", "/var/lib/sd:/var/lib/other")
	if got := DefaultDataDir(); got != "/opt/coordd" {
		t.Errorf("got %q", got)
	}
	t.Setenv("COORDD_DATA_DIR", "")
	if got := DefaultDataDir(); got != "/var/lib/sd" {
		t.Errorf("got %q", got)
	}
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	want := "/xdg/coordd"
	if os.Geteuid() == 0 {
		want = "/var/lib/coordd"
	}
	if got := DefaultDataDir(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestValues(t *testing.T) {
	s := mustLoad(t, one(`semaphores:
  s: {limit: 3, max_waiting: 0, max_hold: 1h, prevent_destroy: true, lease: 1m30s}
cron:
  c:
    schedule: "*/10 * * * *"
    timezone: ""
    command: [sleep, 5, 1.5]
    workdir: /srv
    env: {A: a, B: 2}
    timeout: 0s
    kill_grace: 0s
    catch_up: all
    catch_up_limit: 7
    overlap: allow
    max_attempts: 3
    retry_backoff: 1m
    on_host_loss: fail
    run_on_create: true
    history_limit: 0
queues:
  q1: {max_payload: 512KB, unique: pending_or_running, partitions: 1024}
  q2: {max_payload: 2MB}
  q3: {max_payload: 1000}
  q4: {max_payload: "64MiB"}
`), LoadOptions{})
	sem := s.Semaphores["s"]
	if sem.MaxWaiting == nil || *sem.MaxWaiting != 0 || sem.MaxHold != time.Hour || !sem.PreventDestroy || sem.Lease != 90*time.Second {
		t.Errorf("semaphore = %+v", sem)
	}
	c := s.Cron["c"]
	if !reflect.DeepEqual(c.Command.Argv, []string{"sleep", "5", "1.5"}) || c.Workdir != "/srv" ||
		!reflect.DeepEqual(c.Env, map[string]string{"A": "a", "B": "2"}) || c.KillGrace != 0 ||
		c.CatchUp != CatchUpAll || c.CatchUpLimit != 7 || c.Overlap != OverlapAllow || c.MaxAttempts != 3 ||
		c.RetryBackoff != time.Minute || c.OnHostLoss != HostLossFail || !c.RunOnCreate || c.HistoryLimit != 0 ||
		c.Timezone != "UTC" {
		t.Errorf("cron = %+v", c)
	}
	sizes := map[string]int64{"q1": 512000, "q2": 2000000, "q3": 1000, "q4": 64 << 20}
	for n, want := range sizes {
		if got := s.Queues[n].MaxPayload; got != want {
			t.Errorf("%s max_payload = %d, want %d", n, got, want)
		}
	}
}

func TestGoodSpecsLoad(t *testing.T) {
	for _, src := range goodSpecs {
		checkInvariants(t, mustLoad(t, one(src), LoadOptions{}))
	}
}

// checkInvariants verifies what every successfully loaded spec promises.
func checkInvariants(t *testing.T, s *Spec) {
	t.Helper()
	if s.Backends == nil || s.Semaphores == nil || s.Cron == nil || s.Queues == nil || s.RateLimits == nil {
		t.Fatalf("nil maps in %+v", s)
	}
	if s.Backends[s.Cluster.Backend] == nil {
		t.Fatalf("cluster backend %q not in backends", s.Cluster.Backend)
	}
	if s.Backends[s.Cluster.Backend].Type == TypeMemcached {
		t.Fatalf("memcached cluster backend")
	}
	for n, b := range s.Backends {
		if b.Name != n || b.Type == "" {
			t.Fatalf("backend %q = %+v", n, b)
		}
	}
	for _, a := range s.Addresses() {
		b := s.BackendOf(a)
		if b == nil {
			t.Fatalf("%s has no backend", a)
		}
		if a.Kind != KindSemaphore && b.Type == TypeMemcached {
			t.Fatalf("%s on memcached", a)
		}
	}
	for n, c := range s.Cron {
		if c.Name != n || c.Sched == nil || c.Timezone == "" || ((c.Command.Argv == nil) == (c.Command.Shell == "")) == (c.Push == nil) {
			t.Fatalf("cron %q = %+v", n, c)
		}
	}
	for n, o := range s.Semaphores {
		if o.Name != n || o.Limit < 1 || o.Mode == "" {
			t.Fatalf("semaphore %q = %+v", n, o)
		}
	}
	for n, o := range s.Queues {
		if o.Name != n || o.Partitions < 1 || o.MaxPayload < 1 {
			t.Fatalf("queue %q = %+v", n, o)
		}
	}
	for n, o := range s.RateLimits {
		if o.Name != n || o.Count < 1 || o.Burst < 1 || o.Interval() < time.Microsecond {
			t.Fatalf("rate limit %q = %+v", n, o)
		}
	}
	_ = s.Hash()
}

// TestRedactSecrets: every piece of six bytes or more of a password, and
// a shorter password whole, is hidden from a driver's message; the rest
// of the message stays readable.
func TestRedactSecrets(t *testing.T) {
	cases := []struct{ msg, value, want string }{
		{`dial secaudit:PlainSecret123tcp: unknown network secaudit:PlainSecret123tcp`, "secaudit:PlainSecret123tcp(h:3306)/db",
			`dial secaudit:****: unknown network secaudit:****`},
		{`parse "redis://u:q7Zr/abcdef@h:6379/0": invalid port ":q7Zr" after host`, "redis://u:q7Zr/abcdef@h:6379/0",
			`parse "redis://u:****@h:6379/0": invalid port ":q7Zr" after host`},
		{`Access denied for user 'root'@'h' (using password: YES)`, "root:Passw0rd-x@tcp(h)/d", `Access denied for user 'root'@'h' (using password: YES)`},
		{`bad value: xyzhunter2`, "u:hunter2@tcp(h)/d", `bad value: xyz****`},
		{`short pw abc in abc`, "u:abc@tcp(h)/d", `short pw **** in ****`},
		{`no password here`, "u@tcp(h)/d", `no password here`},
		{`failed to connect to user=u: password s3cr3t-pw refused`, "host=db1 user=u password=s3cr3t-pw", `failed to connect to user=u: password **** refused`},
		{`bad quoted s3 cr3t here`, "host=db1 password='s3 cr3t' user=u", `bad quoted **** here`},
		{`cannot parse password='unterminated pw`, "host=db1 password='unterminated pw", `cannot parse password='****`},
		{`connect postgres://u:pgpass99@db1/c failed`, "postgres://u:pgpass99@db1/c", `connect postgres://u:****@db1/c failed`},
	}
	for _, c := range cases {
		if got := RedactSecrets(c.msg, c.value); got != c.want {
			t.Errorf("RedactSecrets(%q, %q) = %q, want %q", c.msg, c.value, got, c.want)
		}
	}
	huge := strings.Repeat("x", 1<<20)
	if got := RedactSecrets(huge, "u:"+strings.Repeat("y", 64)+"@tcp(h)/d"); got == huge || len(got) > 100 {
		t.Errorf("a message too long to compare is not replaced: %d bytes", len(got))
	}
}

// TestSessionModeOnPostgres: mode session loads on postgres, and its
// waiters have no wake strategy to choose (the row records none), while
// on mysql it defaults to poll.
func TestSessionModeOnPostgres(t *testing.T) {
	s := mustLoad(t, one(pgHeader+"semaphores:\n  s: {limit: 2, mode: session}\n"), LoadOptions{})
	if got := s.Semaphores["s"]; got.Mode != ModeSession || got.Wake != "" {
		t.Errorf("postgres session semaphore: mode %q wake %q, want session and no wake", got.Mode, got.Wake)
	}
	m := mustLoad(t, one("backends:\n  db: {type: mysql, dsn: \"u:p@tcp(h:3306)/d\"}\nsemaphores:\n  s: {limit: 2, mode: session}\n"), LoadOptions{})
	if got := m.Semaphores["s"].Wake; got != WakePoll {
		t.Errorf("mysql session semaphore: wake %q, want %q", got, WakePoll)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]struct {
		count int
		per   time.Duration
	}{
		"100/1m": {100, time.Minute}, "10/s": {10, time.Second}, "5/1h": {5, time.Hour},
		"3/90s": {3, 90 * time.Second}, " 7 / 250ms ": {7, 250 * time.Millisecond}, "1000000/s": {1000000, time.Second},
	} {
		c, p, err := ParseRate(in)
		if err != nil || c != want.count || p != want.per {
			t.Errorf("ParseRate(%q) = %d, %s, %v; want %d, %s", in, c, p, err, want.count, want.per)
		}
	}
	for _, in := range []string{"", "100", "/1m", "x/1m", "-1/1m", "1/0s", "1/-1s", "1/1d", "1/25h", "2/1us", "1/"} {
		if c, p, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, %s; want an error", in, c, p)
		}
	}
}
