package spec

import "strings"

// Shared by the table tests and as fuzz seeds.

// exampleSpec is the example of docs/spec.md.
const exampleSpec = `backends:
  db:    {type: mysql, dsn: "coordd:${COORDD_DB_PASSWORD}@tcp(db1:3306)/coordd"}
  cache: {type: redis, url: "redis://cache1:6379/0", key_prefix: "coordd:"}
cluster:
  backend: db
  leader_lease: 4s
semaphores:
  image-import: {backend: cache, limit: 5, lease: 2m}
  nightly-report: {limit: 1, mode: session}
  reindex: {backend: cache, limit: 1, max_waiting: 1}
cron:
  nightly-report:
    schedule: "0 4 * * *"
    timezone: Asia/Tokyo
    command: ["/usr/local/bin/report", "--daily"]   # a list runs directly; a string runs with /bin/sh -c
    timeout: 30m
    semaphore: nightly-report
queues:
  thumbnails: {partitions: 4, visibility_timeout: 5m, max_attempts: 5}
`

// goodSpecs load without error (with the test environment).
var goodSpecs = []string{
	exampleSpec,
	"",
	"# only comments\n",
	"semaphores:\n  x: {limit: 1}\n",
	"semaphores:\n  k: {limit: 1, max_waiting: 1, keyed: true, max_hold: 1h}\n",
	"semaphores:\ncron:\nqueues:\n",
	"backends:\n  mc: {type: memcached, servers: [\"mc1:11211\", \"mc2:11211\"]}\n  db: {type: sqlite, path: data/db.sqlite}\ncluster: {backend: db}\nsemaphores:\n  c: {backend: mc, limit: 1, mode: counter}\n",
	"cron:\n  every:\n    schedule: \"@every 7m\"\n    command: \"echo ${HOME} $$\"\n    env: {A: \"1\", B: 2}\n    catch_up: all\n    catch_up_limit: 5\n",
	"queues:\n  q: {max_payload: 64KiB, unique: pending, timeout: 1m}\n",
	"rate_limits:\n  api: {rate: 100/1m, burst: 10}\n  per-user: {rate: 10/s, keyed: true}\n  slow: {rate: 5/1h, prevent_destroy: true}\n",
	"queues:\n  q: {rate_limit: api}\nrate_limits:\n  api: {rate: 100/1m}\n",
	mcPrefix("app/prod~1:" + strings.Repeat("x", MaxMemcachedKeyPrefix-11)), // printable, at the length limit
	"backends:\n  db: {type: mysql, dsn: \"u:${PW:-x}@tcp(h:3306)/d\", table_prefix: app_}\nsemaphores:\n  s: {limit: 2, mode: session, wake: kill}\nqueues:\n  q: {claim: skip_locked}\n",
	pgHeader + "semaphores:\n  s: {limit: 2, mode: session, max_waiting: 3}\n",
	"cron:\n  r:\n    schedule: \"@hourly\"\n    command: \"true\"\n    on_failure: {command: [\"/usr/local/bin/page\", \"--team\", ops], webhook: \"https://hooks.example.com/T0/B0/x\", missed_after: 10m}\nqueues:\n  q: {on_failure: {webhook: {url: \"https://h.example.com/\", headers: {Authorization: \"Bearer ${COORDD_DB_PASSWORD}\"}, timeout: 5s, retries: 0}}}\n",
	"backends:\n  r:\n    type: redis\n    sentinel: {master: mymaster, addrs: [\"s1:26379\", \"s2:26379\"], db: 2, username: app, password: \"${PW:-x}\", sentinel_password: \"${SPW:-y}\"}\ncluster: {backend: r}\n",
}

// badCase is a spec with one known problem.
type badCase struct {
	name  string
	files map[string]string // file name -> content; one file is "a.yaml"
	pos   string            // FILE:LINE:COL of the error under test
	msg   string            // substring of "ADDRESS: MSG"
	count int               // total number of errors; 0 means 1
	opts  LoadOptions
}

func one(s string) map[string]string { return map[string]string{"a.yaml": s} }

const mcHeader = `backends:
  db: {type: sqlite}
  mc: {type: memcached, servers: ["mc1:11211"]}
cluster: {backend: db}
`

// mcPrefix is a spec with a memcached backend mc whose key_prefix is the
// YAML double-quoted string prefix, at a.yaml:3:61.
func mcPrefix(prefix string) string {
	return "backends:\n  db: {type: sqlite}\n  mc: {type: memcached, servers: [\"mc1:11211\"], key_prefix: \"" + prefix + "\"}\ncluster: {backend: db}\n"
}

const pgHeader = `backends:
  db: {type: postgres, dsn: "postgres://db1/c"}
`

const redisHeader = `backends:
  r: {type: redis, url: "redis://h:6379/0"}
`

var badCases = []badCase{
	{name: "on_failure without a hook", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    on_failure: {missed_after: 1h}\n"),
		pos: "a.yaml:5:5", msg: "cron.x.on_failure: needs a command, a webhook, or both"},
	{name: "webhook not http", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    on_failure: {webhook: \"ftp://secret-host/T0KEN\"}\n"),
		pos: "a.yaml:5:27", msg: "cron.x.on_failure.webhook: must be an http:// or https:// URL (the value is not shown"},
	{name: "webhook url unset variable", files: one("queues:\n  q:\n    on_failure:\n      webhook: {url: \"${SLACK_URL}\"}\n"),
		pos: "a.yaml:4:22", msg: "queue.q.on_failure.webhook.url: environment variable SLACK_URL is not set"},
	{name: "missed_after on a queue", files: one("queues:\n  q:\n    on_failure: {command: \"true\", missed_after: 1h}\n"),
		pos: "a.yaml:3:35", msg: "queue.q.on_failure: missed_after belongs to a cron task's on_failure"},
	{name: "webhook retries out of range", files: one("queues:\n  q:\n    on_failure: {webhook: {url: \"http://h/\", retries: 11}}\n"),
		pos: "a.yaml:3:55", msg: "queue.q.on_failure.webhook.retries: must be at most 10"},
	{name: "webhook bad header name", files: one("queues:\n  q:\n    on_failure: {webhook: {url: \"http://h/\", headers: {\"X Bad\": v}}}\n"),
		pos: "a.yaml:3:56", msg: "queue.q.on_failure.webhook.headers: a header name holds only"},
	{name: "on_failure with no history", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    history_limit: 0\n    on_failure: {command: \"true\"}\n"),
		pos: "a.yaml:5:20", msg: "cron.x.history_limit: must be at least 1 with on_failure"},
	{name: "rate limit without rate", files: one("rate_limits:\n  r: {burst: 2}\n"),
		pos: "a.yaml:2:3", msg: `rate_limit.r: missing required field "rate"`},
	{name: "rate without period", files: one("rate_limits:\n  r: {rate: \"100\"}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: must be COUNT/PERIOD like 100/1m`},
	{name: "rate as a number", files: one("rate_limits:\n  r: {rate: 100}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: must be a string, got integer 100`},
	{name: "rate with zero count", files: one("rate_limits:\n  r: {rate: 0/1m}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: count must be a positive integer`},
	{name: "rate with bad period", files: one("rate_limits:\n  r: {rate: 5/fortnight}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: period must be a duration like 1m`},
	{name: "rate period too long", files: one("rate_limits:\n  r: {rate: 5/48h}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: period must be at most 24h0m0s`},
	{name: "rate too fast", files: one("rate_limits:\n  r: {rate: 2000000/1s}\n"),
		pos: "a.yaml:2:13", msg: `rate_limit.r.rate: at most one permit per 1µs`},
	{name: "burst zero", files: one("rate_limits:\n  r: {rate: 10/s, burst: 0}\n"),
		pos: "a.yaml:2:26", msg: `rate_limit.r.burst: must be at least 1, got 0`},
	{name: "rate limit unknown field", files: one("rate_limits:\n  r: {rate: 10/s, brust: 2}\n"),
		pos: "a.yaml:2:19", msg: `rate_limit.r: unknown field "brust" (did you mean "burst"?)`},
	{name: "rate limit on undeclared backend", files: one("backends:\n  db: {type: sqlite}\nrate_limits:\n  r: {rate: 10/s, backend: dbx}\n"),
		pos: "a.yaml:4:28", msg: `rate_limit.r.backend: backend "dbx" is not declared`},
	{name: "unknown field", files: one("semaphores:\n  x: {limt: 5, limit: 1}\n"),
		pos: "a.yaml:2:7", msg: `semaphore.x: unknown field "limt" (did you mean "limit"?)`},
	{name: "wrong type", files: one("semaphores:\n  x: {limit: five}\n"),
		pos: "a.yaml:2:14", msg: `semaphore.x.limit: must be an integer, got string "five"`},
	{name: "duplicate name across files", files: map[string]string{
		"a.yaml": "cron:\n  x: {schedule: \"@daily\", command: \"true\"}\n",
		"b.yaml": "cron:\n  x: {schedule: \"@daily\", command: \"true\"}\n"},
		pos: "b.yaml:2:3", msg: "cron.x: declared twice: a.yaml:2:3 and b.yaml:2:3"},
	{name: "duplicate name in one file", files: one("queues:\n  q: {}\n  q: {}\n"),
		pos: "a.yaml:3:3", msg: "queue.q: declared twice: a.yaml:2:3 and a.yaml:3:3"},
	{name: "duplicate backend across files", files: map[string]string{
		"a.yaml": "backends:\n  db: {type: sqlite}\n",
		"b.yaml": "\nbackends:\n  db: {type: sqlite}\n"},
		pos: "b.yaml:3:3", msg: "backends.db: declared twice: a.yaml:2:3 and b.yaml:3:3"},
	{name: "duplicate key in one map", files: one("semaphores:\n  x:\n    limit: 1\n    limit: 2\n"),
		pos: "a.yaml:4:5", msg: `semaphore.x: duplicate key "limit"; first at a.yaml:3:5`},
	{name: "duplicate top-level key", files: one("semaphores: {}\nsemaphores: {}\n"),
		pos: "a.yaml:2:1", msg: `duplicate key "semaphores"; first at a.yaml:1:1`},
	{name: "bad cron expression", files: one("cron:\n  x:\n    schedule: \"61 * * * *\"\n    command: \"true\"\n"),
		pos: "a.yaml:3:15", msg: `cron.x.schedule: invalid cron expression "61 * * * *"`},
	{name: "too few cron fields", files: one("cron:\n  x:\n    schedule: \"* * *\"\n    command: \"true\"\n"),
		pos: "a.yaml:3:15", msg: `cron.x.schedule: invalid cron expression "* * *"`},
	{name: "schedule never fires", files: one("cron:\n  x:\n    schedule: \"0 0 30 2 *\"\n    command: \"true\"\n"),
		pos: "a.yaml:3:15", msg: "never fires"},
	{name: "bad timezone", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    timezone: Mars/Base\n    command: \"true\"\n"),
		pos: "a.yaml:4:15", msg: `cron.x.timezone: unknown time zone "Mars/Base"`},
	{name: "Local timezone", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    timezone: Local\n    command: \"true\"\n"),
		pos: "a.yaml:4:15", msg: `cron.x.timezone: "Local" is not allowed`},
	{name: "uppercase name", files: one("semaphores:\n  Reindex: {limit: 1}\n"),
		pos: "a.yaml:2:3", msg: `semaphores: invalid name "Reindex": names are lowercase`},
	{name: "name too long", files: one("semaphores:\n  " + strings.Repeat("a", 64) + ": {limit: 1}\n"),
		pos: "a.yaml:2:3", msg: "a name has at most 63 characters, this one has 64"},
	{name: "leading dash", files: one("semaphores:\n  \"-x\": {limit: 1}\n"),
		pos: "a.yaml:2:3", msg: `invalid name "-x": a name starts with a lowercase letter or a digit`},
	{name: "bad backend name", files: one("backends:\n  my db: {type: sqlite}\n"),
		pos: "a.yaml:2:3", msg: `backends: invalid name "my db"`},
	{name: "missing env var", files: one("backends:\n  db: {type: mysql, dsn: \"coordd:${COORDD_DB_PASSWORD}@tcp(db1:3306)/coordd\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: environment variable COORDD_DB_PASSWORD is not set",
		opts: LoadOptions{Getenv: func(string) (string, bool) { return "", false }}},
	{name: "malformed ${", files: one("backends:\n  r: {type: redis, url: \"redis://h:6379/${\"}\n"),
		pos: "a.yaml:2:25", msg: `backends.r.url: unclosed "${"`, opts: LoadOptions{SkipEnv: true}},
	{name: "malformed ${1X}", files: one("backends:\n  r: {type: redis, url: \"redis://h:6379/0\", key_prefix: \"${1X}\"}\n"),
		pos: "a.yaml:2:57", msg: `backends.r.key_prefix: malformed reference "${...}" at character 1`, opts: LoadOptions{SkipEnv: true}},
	{name: "dangling backend reference", files: one("semaphores:\n  x: {backend: nope, limit: 1}\n"),
		pos: "a.yaml:2:16", msg: `semaphore.x.backend: backend "nope" is not declared`},
	{name: "dangling semaphore reference", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    semaphore: nope\n"),
		pos: "a.yaml:5:16", msg: `cron.x.semaphore: semaphore "nope" is not declared`},
	{name: "dangling cluster backend", files: one("cluster: {backend: nope}\n"),
		pos: "a.yaml:1:20", msg: `cluster.backend: backend "nope" is not declared`},
	{name: "limit below 1", files: one("semaphores:\n  x: {limit: -1}\n"),
		pos: "a.yaml:2:14", msg: "semaphore.x.limit: must be at least 1, got -1"},
	{name: "limit 0", files: one("semaphores:\n  x: {limit: 0}\n"),
		pos: "a.yaml:2:14", msg: "semaphore.x.limit: must be at least 1, got 0"},
	{name: "limit missing", files: one("semaphores:\n  x: {lease: 5s}\n"),
		pos: "a.yaml:2:3", msg: `semaphore.x: missing required field "limit"`},
	{name: "negative duration", files: one("semaphores:\n  x: {limit: 1, lease: -5s}\n"),
		pos: "a.yaml:2:24", msg: "semaphore.x.lease: must not be negative"},
	{name: "integer duration", files: one("semaphores:\n  x: {limit: 1, lease: 30}\n"),
		pos: "a.yaml:2:24", msg: "semaphore.x.lease: must be a duration like 30s, got integer 30"},
	{name: "jitter as long as the interval", files: one("cron:\n  c: {schedule: \"@every 1m\", jitter: 1m, command: \"true\"}\n"),
		pos: "a.yaml:2:38", msg: "cron.c.jitter: must be shorter than the schedule's shortest interval between two runs, 1m0s"},
	{name: "negative starting deadline", files: one("cron:\n  c: {schedule: \"@hourly\", starting_deadline: -1m, command: \"true\"}\n"),
		pos: "a.yaml:2:47", msg: "cron.c.starting_deadline: must not be negative"},
	{name: "negative jitter", files: one("cron:\n  c: {schedule: \"@hourly\", jitter: -5m, command: \"true\"}\n"),
		pos: "a.yaml:2:36", msg: "cron.c.jitter: must not be negative"},
	{name: "zero visibility timeout", files: one("queues:\n  q: {visibility_timeout: 0s}\n"),
		pos: "a.yaml:2:27", msg: "queue.q.visibility_timeout: must be greater than 0"},
	{name: "run lease below 1s", files: one("cron:\n  c: {schedule: \"@daily\", command: \"true\", run_lease: 500ms}\n"),
		pos: "a.yaml:2:55", msg: "cron.c.run_lease: must be at least 1s"},
	{name: "leader lease below 1s", files: one("cluster: {leader_lease: 500ms}\n"),
		pos: "a.yaml:1:25", msg: "cluster.leader_lease: must be at least 1s"},
	{name: "memcached holding a queue", files: one(mcHeader + "queues:\n  q: {backend: mc}\n"),
		pos: "a.yaml:6:16", msg: `queue.q.backend: backend "mc" is memcached, which holds semaphores only`},
	{name: "memcached holding a rate limit", files: one(mcHeader + "rate_limits:\n  r: {backend: mc, rate: 3/90s}\n"),
		pos: "a.yaml:6:16", msg: `rate_limit.r.backend: backend "mc" is memcached, which holds semaphores only; put rate limits (its clock ticks in whole seconds`},
	{name: "queue rate limit not declared", files: one("queues:\n  q: {rate_limit: apx}\nrate_limits:\n  api: {rate: 100/1m}\n"),
		pos: "a.yaml:2:19", msg: `queue.q.rate_limit: rate limit "apx" is not declared (did you mean "api"?)`},
	{name: "queue rate limit keyed", files: one("queues:\n  q: {rate_limit: api}\nrate_limits:\n  api: {rate: 100/1m, keyed: true}\n"),
		pos: "a.yaml:2:19", msg: `queue.q.rate_limit: rate limit "api" is keyed`},
	{name: "queue rate limit on another backend", files: one("backends:\n  a: {type: sqlite}\n  b: {type: sqlite, path: b.db}\ncluster: {backend: a}\nqueues:\n  q: {rate_limit: api}\nrate_limits:\n  api: {rate: 100/1m, backend: b}\n"),
		pos: "a.yaml:6:19", msg: `queue.q.rate_limit: rate limit "api" is on backend "b" and the queue on "a"`},
	{name: "memcached holding cron", files: one(mcHeader + "cron:\n  c: {backend: mc, schedule: \"@daily\", command: \"true\"}\n"),
		pos: "a.yaml:6:16", msg: `cron.c.backend: backend "mc" is memcached, which holds semaphores only`},
	{name: "mode session on sqlite", files: one("semaphores:\n  x: {limit: 1, mode: session}\n"),
		pos: "a.yaml:2:23", msg: `semaphore.x.mode: mode session needs a mysql or postgres backend; backend "embedded" is sqlite`},
	{name: "mode counter on redis", files: one(redisHeader + "semaphores:\n  x: {limit: 1, mode: counter}\n"),
		pos: "a.yaml:4:23", msg: `semaphore.x.mode: mode counter needs a memcached backend; backend "r" is redis`},
	{name: "counter with limit 2", files: one(mcHeader + "semaphores:\n  x: {backend: mc, limit: 2, mode: counter}\n"),
		pos: "a.yaml:6:27", msg: "semaphore.x.limit: mode counter allows only limit 1, got 2"},
	{name: "max_waiting on memcached", files: one(mcHeader + "semaphores:\n  x: {backend: mc, limit: 2, max_waiting: 1}\n"),
		pos: "a.yaml:6:43", msg: `semaphore.x.max_waiting: memcached keeps no line of waiters`},
	{name: "keyed on memcached", files: one(mcHeader + "semaphores:\n  x: {backend: mc, limit: 1, keyed: true}\n"),
		pos: "a.yaml:6:37", msg: `semaphore.x.keyed: memcached cannot hold keyed semaphores`},
	{name: "keyed in mode session", files: one("backends:\n  db: {type: mysql, dsn: \"u:p@tcp(h:3306)/d\"}\nsemaphores:\n  x: {limit: 1, mode: session, keyed: true}\n"),
		pos: "a.yaml:4:39", msg: `semaphore.x.keyed: keyed needs mode lease`},
	{name: "keyed in mode session on postgres", files: one(pgHeader + "semaphores:\n  x: {limit: 1, mode: session, keyed: true}\n"),
		pos: "a.yaml:4:39", msg: `semaphore.x.keyed: keyed needs mode lease: in mode session a slot is a lock of the holder's connection`},
	{name: "wake in mode session on postgres", files: one(pgHeader + "semaphores:\n  x: {limit: 2, mode: session, wake: kill}\n"),
		pos: "a.yaml:4:38", msg: "semaphore.x.wake: wake applies only to mode session on mysql; on postgres"},
	{name: "cron naming a keyed semaphore", files: one("semaphores:\n  k: {limit: 1, keyed: true}\ncron:\n  c: {schedule: \"@every 1m\", command: \"true\", semaphore: k}\n"),
		pos: "a.yaml:4:58", msg: `cron.c.semaphore: semaphore "k" is keyed, and a cron task has no key to give it`},
	{name: "wake on lease mode", files: one("semaphores:\n  x: {limit: 1, wake: kill}\n"),
		pos: "a.yaml:2:23", msg: "semaphore.x.wake: wake applies only to mode session"},
	{name: "unknown mode", files: one("semaphores:\n  x: {limit: 1, mode: leese}\n"),
		pos: "a.yaml:2:23", msg: `semaphore.x.mode: must be one of lease, session, counter; got "leese" (did you mean "lease"?)`},
	{name: "claim skip_locked on redis", files: one(redisHeader + "queues:\n  q: {claim: skip_locked}\n"),
		pos: "a.yaml:4:14", msg: `queue.q.claim: claim skip_locked needs a mysql backend; backend "r" is redis`},
	{name: "ambiguous default backend", files: one("backends:\n  a: {type: sqlite}\n  b: {type: sqlite}\nsemaphores:\n  x: {limit: 1}\n"),
		pos: "a.yaml:5:3", msg: "semaphore.x.backend: 2 backends are declared (a, b) and cluster.backend is not set; set backend or cluster.backend",
		count: 2},
	{name: "ambiguous cluster backend", files: one("backends:\n  a: {type: sqlite}\n  b: {type: sqlite}\n"),
		pos: "a.yaml:1:1", msg: "cluster.backend: 2 backends are declared (a, b) and cluster.backend is not set"},
	{name: "memcached as cluster backend", files: one("backends:\n  mc: {type: memcached, servers: [\"mc1:11211\"]}\n  db: {type: sqlite}\ncluster:\n  backend: mc\n"),
		pos: "a.yaml:5:12", msg: "cluster.backend: memcached cannot hold cluster state (inventory, leader lease); use sqlite, mysql, postgres or redis"},
	{name: "only memcached declared", files: one("backends:\n  mc: {type: memcached, servers: [\"mc1:11211\"]}\nsemaphores:\n  x: {limit: 1}\n"),
		pos: "a.yaml:2:3", msg: "cluster.backend: memcached cannot hold cluster state"},
	{name: "unknown backend type", files: one("backends:\n  db: {type: postgresql}\n"),
		pos: "a.yaml:2:14", msg: `backends.db.type: unknown backend type "postgresql" (did you mean "postgres"?); use sqlite, mysql, postgres, redis or memcached`},
	{name: "postgres without dsn", files: one("backends:\n  db: {type: postgres}\n"),
		pos: "a.yaml:2:3", msg: `backends.db: missing required field "dsn", e.g. "postgres://`},
	{name: "postgres dsn unterminated quote", files: one("backends:\n  db: {type: postgres, dsn: \"host=db1 password='hunter2xyz\"}\n"),
		pos: "a.yaml:2:29", msg: `backends.db.dsn: is not a valid PostgreSQL DSN (a postgres:// URL or keyword=value pairs): invalid PostgreSQL DSN: the value of password has no closing quote`},
	{name: "postgres dsn bad sslmode", files: one("backends:\n  db: {type: postgres, dsn: \"postgres://u:hunter2xyz@db1/c?sslmode=on\"}\n"),
		pos: "a.yaml:2:29", msg: `sslmode "on" is not one of disable, allow, prefer, require, verify-ca, verify-full`},
	{name: "postgres schema not an identifier", files: one("backends:\n  db: {type: postgres, dsn: \"postgres://db1/c\", schema: \"a;drop\"}\n"),
		pos: "a.yaml:2:57", msg: `backends.db.schema: must be a lower-case identifier`},
	{name: "postgres wake unknown", files: one("backends:\n  db: {type: postgres, dsn: \"postgres://db1/c\", wake: listen}\n"),
		pos: "a.yaml:2:55", msg: `backends.db.wake: must be one of notify, poll; got "listen"`},
	{name: "schema on a mysql backend", files: one("backends:\n  db: {type: mysql, dsn: \"u@tcp(h)/d\", schema: x}\n"),
		pos: "a.yaml:2:40", msg: `backends.db: field "schema" does not apply to mysql backends (it is for postgres)`},
	{name: "missing backend type", files: one("backends:\n  db: {path: x.db}\n"),
		pos: "a.yaml:2:3", msg: `backends.db: missing required field "type"`},
	{name: "dsn on a redis backend", files: one("backends:\n  r: {type: redis, url: \"redis://h:6379/0\", dsn: \"u:hunter2@tcp(h)/d\"}\n"),
		pos: "a.yaml:2:45", msg: `backends.r: field "dsn" does not apply to redis backends (it is for mysql and postgres)`},
	{name: "durable on a mysql backend", files: one("backends:\n  db: {type: mysql, dsn: \"u@tcp(h)/d\", durable: true}\n"),
		pos: "a.yaml:2:40", msg: `backends.db: field "durable" does not apply to mysql backends (it is for redis)`},
	{name: "durable not a boolean", files: one("backends:\n  r: {type: redis, url: \"redis://h:6379/0\", durable: yes please}\n"),
		pos: "a.yaml:2:54", msg: `backends.r.durable: must be a boolean (true or false)`},
	{name: "redis url with http scheme", files: one("backends:\n  r: {type: redis, url: \"http://h:6379/0\"}\n"),
		pos: "a.yaml:2:25", msg: `backends.r.url: must be a redis:// or rediss:// URL, got scheme "http"`},
	{name: "redis url missing", files: one("backends:\n  r: {type: redis}\n"),
		pos: "a.yaml:2:3", msg: `backends.r: missing required field "url"`},
	{name: "redis with url and sentinel", files: one("backends:\n  r: {type: redis, url: \"redis://h:6379/0\", sentinel: {master: m, addrs: [\"s1:26379\"]}}\n"),
		pos: "a.yaml:2:55", msg: `backends.r.sentinel: cannot be used with "url"`},
	{name: "sentinel without master", files: one("backends:\n  r:\n    type: redis\n    sentinel: {addrs: [\"s1:26379\"]}\n"),
		pos: "a.yaml:4:5", msg: `backends.r.sentinel: missing required field "master"`},
	{name: "sentinel without addrs", files: one("backends:\n  r:\n    type: redis\n    sentinel: {master: mymaster}\n"),
		pos: "a.yaml:4:5", msg: `backends.r.sentinel: missing required field "addrs"`},
	{name: "sentinel address without port", files: one("backends:\n  r:\n    type: redis\n    sentinel:\n      master: mymaster\n      addrs: [\"s1:26379\", \"s2\"]\n"),
		pos: "a.yaml:6:27", msg: `backends.r.sentinel.addrs[1]: must be host:port, got "s2"`},
	{name: "sentinel unknown field", files: one("backends:\n  r:\n    type: redis\n    sentinel: {master: m, addrs: [\"s:1\"], url: \"redis://x\"}\n"),
		pos: "a.yaml:4:43", msg: `backends.r.sentinel: unknown field "url"`},
	{name: "sentinel negative db", files: one("backends:\n  r:\n    type: redis\n    sentinel: {master: m, addrs: [\"s:1\"], db: -1}\n"),
		pos: "a.yaml:4:47", msg: `backends.r.sentinel.db: must be at least 0, got -1`},
	{name: "sentinel not a mapping", files: one("backends:\n  r: {type: redis, sentinel: \"s1:26379\"}\n"),
		pos: "a.yaml:2:30", msg: `backends.r.sentinel: must be a mapping of settings, got string "s1:26379"`},
	{name: "sentinel password not a string", files: one("backends:\n  r:\n    type: redis\n    sentinel: {master: m, addrs: [\"s:1\"], password: 12345}\n"),
		pos: "a.yaml:4:53", msg: `backends.r.sentinel.password: must be a string, got integer`},
	{name: "invalid mysql dsn", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: invalid DSN: missing the slash"},
	{name: "bad mysql pool parameter", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)/d?maxOpenConns=0\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: parameter maxOpenConns: want an integer of at least 1, got \"0\""},
	{name: "mysql dsn with a multibyte charset", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)/d?charset=utf8mb4,gbk\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: charset \"gbk\": the connection charset must be one of utf8mb4, utf8, utf8mb3, latin1, ascii, binary"},
	{name: "mysql dsn setting the charset as a session variable", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)/d?character_set_client=big5\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: parameter character_set_client sets the connection charset or collation"},
	{name: "mysql dsn with a driver parameter of a bad value", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)/d?tls=custom\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: invalid value / unknown config name: custom"},
	{name: "mysql dsn with the removed strict parameter", files: one("backends:\n  db: {type: mysql, dsn: \"u:hunter2@tcp(h:3306)/d?strict=true\"}\n"),
		pos: "a.yaml:2:26", msg: "backends.db.dsn: is not a valid MySQL DSN: parameter strict: the MySQL driver has no strict mode any more"},
	{name: "bad table prefix", files: one("backends:\n  db: {type: mysql, dsn: \"u:p@tcp(h:3306)/d\", table_prefix: \"bad-prefix\"}\n"),
		pos: "a.yaml:2:61", msg: "backends.db.table_prefix: must be at most 32 letters"},
	{name: "bad memcached server", files: one(mcHeader[:len("backends:\n  db: {type: sqlite}\n")] + "  mc: {type: memcached, servers: [\"mc1\"]}\ncluster: {backend: db}\n"),
		pos: "a.yaml:3:35", msg: `backends.mc.servers[0]: must be host:port, got "mc1"`},
	{name: "memcached key_prefix with a space", files: one(mcPrefix("a b")),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must be printable ASCII without spaces (memcached keys are), got "a b" whose byte 1 is 0x20`},
	{name: "memcached key_prefix with a newline", files: one(mcPrefix(`a\nb`)),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must be printable ASCII without spaces (memcached keys are), got "a\nb" whose byte 1 is 0x0a`},
	{name: "memcached key_prefix not ASCII", files: one(mcPrefix("café:")),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must be printable ASCII without spaces`},
	{name: "memcached key_prefix with a brace", files: one(mcPrefix("app{x}:")),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must not hold braces`},
	{name: "memcached key_prefix too long", files: one(mcPrefix(strings.Repeat("p", MaxMemcachedKeyPrefix+1))),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must be at most 115 bytes, got 116: memcached keys are at most 250 bytes`},
	{name: "memcached key_prefix from the environment", files: one(mcPrefix("${SPACED}")),
		pos: "a.yaml:3:61", msg: `backends.mc.key_prefix: must be printable ASCII`,
		opts: LoadOptions{Getenv: func(k string) (string, bool) { return "a b", k == "SPACED" }}},
	{name: "empty command list", files: one("cron:\n  x: {schedule: \"@daily\", command: []}\n"),
		pos: "a.yaml:2:36", msg: "cron.x.command: must not be empty"},
	{name: "empty program", files: one("cron:\n  x: {schedule: \"@daily\", command: [\"\", a]}\n"),
		pos: "a.yaml:2:37", msg: "cron.x.command[0]: the program must not be empty"},
	{name: "command missing", files: one("cron:\n  x: {schedule: \"@daily\"}\n"),
		pos: "a.yaml:2:3", msg: `cron.x: missing required field "command"`},
	{name: "relative workdir", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    workdir: tmp/x\n"),
		pos: "a.yaml:5:14", msg: `cron.x.workdir: must be an absolute path, got "tmp/x"`},
	{name: "bad env key", files: one("cron:\n  x:\n    schedule: \"@daily\"\n    command: \"true\"\n    env: {1BAD: x}\n"),
		pos: "a.yaml:5:11", msg: `cron.x.env: invalid variable name "1BAD"`},
	{name: "bad catch_up", files: one("cron:\n  x: {schedule: \"@daily\", command: \"true\", catch_up: always}\n"),
		pos: "a.yaml:2:54", msg: "cron.x.catch_up: must be one of none, once, all"},
	{name: "max_payload garbage", files: one("queues:\n  q: {max_payload: lots}\n"),
		pos: "a.yaml:2:20", msg: `queue.q.max_payload: must be a size like 1048576`},
	{name: "max_payload too big", files: one("queues:\n  q: {max_payload: 65MiB}\n"),
		pos: "a.yaml:2:20", msg: "queue.q.max_payload: must be at most 64MiB"},
	{name: "partitions 0", files: one("queues:\n  q: {partitions: 0}\n"),
		pos: "a.yaml:2:19", msg: "queue.q.partitions: must be at least 1, got 0"},
	{name: "partitions too many", files: one("queues:\n  q: {partitions: 1025}\n"),
		pos: "a.yaml:2:19", msg: "queue.q.partitions: must be at most 1024, got 1025"},
	{name: "TZ= in schedule", files: one("cron:\n  x:\n    schedule: \"TZ=UTC 0 4 * * *\"\n    command: \"true\"\n"),
		pos: "a.yaml:3:15", msg: "cron.x.schedule: TZ= and CRON_TZ= prefixes are not allowed"},
	{name: "@every too short", files: one("cron:\n  x:\n    schedule: \"@every 500ms\"\n    command: \"true\"\n"),
		pos: "a.yaml:3:15", msg: "cron.x.schedule: @every: the interval must be at least 1s"},
	{name: "cluster set twice in two files", files: map[string]string{
		"a.yaml": "cluster:\n  leader_lease: 5s\n",
		"b.yaml": "cluster:\n  leader_lease: 6s\n"},
		pos: "b.yaml:1:1", msg: "cluster: declared twice: a.yaml:1:1 and b.yaml:1:1"},
	{name: "invalid YAML syntax", files: one("semaphores:\n  x:\n    limit: 1\n   lease: 2s\n"),
		pos: "a.yaml:4:1", msg: "invalid YAML: did not find expected key"},
	{name: "tab indentation", files: one("semaphores:\n\tx: {limit: 1}\n"),
		pos: "a.yaml:2:1", msg: "invalid YAML: found character that cannot start any token"},
	{name: "alias refused", files: one("semaphores:\n  x: &s {limit: 1}\n  y: *s\n"),
		pos: "a.yaml:3:6", msg: "YAML aliases (*s) are not supported"},
	{name: "unknown top-level key", files: one("semaphore:\n  x: {limit: 1}\n"),
		pos: "a.yaml:1:1", msg: `unknown top-level key "semaphore" (did you mean "semaphores"?)`},
	{name: "top level is a list", files: one("- semaphores\n"),
		pos: "a.yaml:1:1", msg: "the top level must be a mapping"},
	{name: "two documents", files: one("semaphores: {}\n---\nqueues: {}\n"),
		pos: "a.yaml:3:1", msg: "a file holds one YAML document"},
	{name: "object is not a mapping", files: one("semaphores:\n  x: 5\n"),
		pos: "a.yaml:2:6", msg: "semaphore.x: must be a mapping of settings, got integer 5"},
	{name: "section is a list", files: one("queues: [a, b]\n"),
		pos: "a.yaml:1:9", msg: "queues: must be a mapping of name to settings, got a list"},
	{name: "bool field wrong type", files: one("semaphores:\n  x: {limit: 1, prevent_destroy: yes}\n"),
		pos: "a.yaml:2:34", msg: `semaphore.x.prevent_destroy: must be a boolean (true or false), got string "yes"`},
	{name: "limit too large", files: one("semaphores:\n  x: {limit: 1000000}\n"),
		pos: "a.yaml:2:14", msg: "semaphore.x.limit: must be at most 10000"},
	{name: "merge key", files: one("semaphores:\n  x: {limit: 1, <<: {lease: 1s}}\n"),
		pos: "a.yaml:2:17", msg: "semaphore.x: merge keys (<<) are not supported"},
}
