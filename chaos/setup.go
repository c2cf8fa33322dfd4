package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/coordd/coordd/internal/testenv"
)

// sleepSnippet sleeps 0.5-3 s, drawn from /dev/urandom.
const sleepSnippet = `ms=$((500 + $(od -An -N2 -tu2 /dev/urandom) % 2501))
sleep $((ms / 1000)).$(printf %03d $((ms % 1000)))
`

// writeScripts writes the commands coordd runs. They, not coordd, write
// the evidence.
func (w *world) writeScripts() {
	for _, d := range []string{"holders", "fence"} {
		if err := os.Mkdir(w.path(d), 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
	cron := fmt.Sprintf(`line="$COORDD_TASK $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_TEST_HOST $COORDD_FENCING_TOKEN"
echo "start $line $(date +%%s.%%N)" >> %[1]s
%[2]secho "end $line $(date +%%s.%%N)" >> %[1]s
`, w.path("cron.log"), sleepSnippet)
	// The witness: under flock, the holder adds its pid file and counts the
	// pid files of holders still alive (a holder killed with its sem run
	// leaves a file behind that no longer counts). The count is written
	// before the holder does anything else.
	//
	// The witness is also the resource the fencing token protects: it
	// keeps the highest token seen per slot, and records each holder's
	// token against it when the holder starts and when it ends.
	hold := fmt.Sprintf(`me=$$
flock %[1]s sh -c 'touch "$1/$2"; n=0
for f in "$1"/*; do
  s=$(cut -d" " -f3 "/proc/${f##*/}/stat" 2>/dev/null)
  if [ -n "$s" ] && [ "$s" != Z ]; then n=$((n+1)); else rm -f "$f"; fi
done
echo $n >> "$3"
h=$(cat "$4/$5" 2>/dev/null || echo 0)
echo "start $5 $6 $h $2" >> "$7"
if [ "$6" -gt "$h" ]; then echo "$6" > "$4/$5"; fi' _ %[2]s $me %[3]s %[6]s "$COORDD_SLOT" "$COORDD_FENCING_TOKEN" %[7]s
echo "in $COORDD_CHAOS_CLIENT $(date +%%s.%%N)" >> %[4]s
%[5]secho "out $COORDD_CHAOS_CLIENT $(date +%%s.%%N)" >> %[4]s
flock %[1]s sh -c 'rm -f "$1/$2"; echo "end $4 $5 $(cat "$3/$4") $2" >> "$6"' _ %[2]s $me %[6]s "$COORDD_SLOT" "$COORDD_FENCING_TOKEN" %[7]s
`, w.path("witness.lock"), w.path("holders"), w.path("peaks"), w.path("sem.log"), sleepSnippet, w.path("fence"), w.path("fencing"))
	// The task with the defaults runs a short command, so that the times
	// that wait for a lost run catch up within the settling time.
	defaults := fmt.Sprintf(`line="$COORDD_TASK $COORDD_SCHEDULED_AT $COORDD_ATTEMPT $COORDD_TEST_HOST $COORDD_FENCING_TOKEN"
echo "start $line $(date +%%s.%%N)" >> %[1]s
ms=$((100 + $(od -An -N2 -tu2 /dev/urandom) %% 901))
sleep $((ms / 1000)).$(printf %%03d $((ms %% 1000)))
echo "end $line $(date +%%s.%%N)" >> %[1]s
`, w.path("cron.log"))
	handle := fmt.Sprintf(`read -r p
line="$p $COORDD_JOB_ID $COORDD_ATTEMPT $COORDD_CHAOS_WORKER"
echo "start $line $(date +%%s.%%N)" >> %[1]s
%[2]secho "done $line $(date +%%s.%%N)" >> %[1]s
`, w.path("queue.log"), sleepSnippet)
	for name, body := range map[string]string{"cron.sh": cron, "defaults.sh": defaults, "hold.sh": hold, "handle.sh": handle} {
		if err := os.WriteFile(w.path(name), []byte(body), 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
}

// writeSpec starts the backend's private server and writes the spec.
func (w *world) writeSpec() {
	var header, semBackend string
	switch w.cfg.Backend {
	case "sqlite":
		// The implicit embedded store in the shared data dir. It has no
		// server to restart: its outage is a stall, another process
		// holding the write lock.
		w.srv = &testenv.SQLiteStall{Path: filepath.Join(w.env.DataDir, "coordd.db")}
	case "mysql":
		m := testenv.StartMariaDB(w.t)
		w.srv = m
		dsn := strings.Replace(m.CreateDatabase(w.t), m.Addr(), w.startNetwork(m.Addr()), 1)
		header = fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db, leader_lease: %s}\n", dsn, leaderLease)
	case "postgres":
		// Killed with SIGKILL and started again on the same data
		// directory: the restart is a crash recovery.
		pg := testenv.StartPostgres(w.t)
		w.srv = pg
		dsn := strings.Replace(pg.CreateDatabase(w.t), pg.Addr(), w.startNetwork(pg.Addr()), 1)
		header = fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q}\ncluster: {backend: db, leader_lease: %s}\n", dsn, leaderLease)
	case "redis", "redis-stale-failover":
		r := testenv.StartRedis(w.t, redisArgs...)
		w.srv = r
		if w.cfg.Backend == "redis-stale-failover" {
			// The failover is this run's outage: a restart would bring
			// a promoted replica back as a replica.
			w.startStaleReplica(r)
			w.srv = nil
		}
		addr := fmt.Sprintf("127.0.0.1:%d", r.Port)
		header = fmt.Sprintf("backends:\n  cache: {type: redis, url: \"redis://%s/0\", key_prefix: \"chaos:\"}\ncluster: {backend: cache, leader_lease: %s}\n", w.startNetwork(addr), leaderLease)
	case "redis-sentinel":
		// No proxy: the Sentinels hand out the servers' own addresses. A
		// clean failover stands in for the backend restart.
		header = fmt.Sprintf("backends:\n  cache: {type: redis, %s, key_prefix: \"chaos:\"}\ncluster: {backend: cache, leader_lease: %s}\n", w.startSentinels(), leaderLease)
	case "memcached":
		// memcached keeps nothing across a restart: the restart is a data
		// loss that the loss marker must turn into a hold.
		m := testenv.StartMemcached(w.t)
		w.srv = m
		header = fmt.Sprintf("backends:\n  local: {type: sqlite}\n  mc: {type: memcached, servers: [%q], key_prefix: \"chaos:\"}\ncluster: {backend: local, leader_lease: %s}\n", w.startNetwork(m.Addr()), leaderLease)
		semBackend = ", backend: mc"
	default:
		w.t.Fatalf("chaos: unknown backend %q", w.cfg.Backend)
	}
	if w.cfg.Backend == "sqlite" {
		header = fmt.Sprintf("cluster: {leader_lease: %s}\n", leaderLease)
	}
	body := fmt.Sprintf(`semaphores:
  pool: {limit: %d, lease: 3s%s}
cron:
  tick:
    schedule: "@every %s"
    catch_up: all
    overlap: allow
    max_attempts: 3
    retry_backoff: 0s
    on_host_loss: retry
    run_lease: %s
    command: [/bin/sh, %q]
  %s:
    schedule: "@every %s"
    catch_up: all
    command: [/bin/sh, %q]
queues:
  jobs: {partitions: 4, visibility_timeout: %s, max_attempts: 100, retry_backoff: 0s}
`, semLimit, semBackend, cronStep, runLease, w.path("cron.sh"), defaultsTask, cronStep, w.path("defaults.sh"), visibilityTimeout)
	w.spec = w.path("coordd.yaml")
	if err := os.WriteFile(w.spec, []byte(header+body), 0o644); err != nil {
		w.t.Fatal(err)
	}
}
