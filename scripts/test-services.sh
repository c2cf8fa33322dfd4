#!/usr/bin/env bash
# test-services.sh: make sure MariaDB, PostgreSQL, Redis and memcached are reachable for the
# tests, run the tests, and tear down whatever this script started.
#
# Usage:
#   scripts/test-services.sh            # go vet ./... && go test -race -count=1 -timeout 25m ./...
#   scripts/test-services.sh CMD [ARG]  # run CMD instead, with the services up and the
#                                       # COORDD_TEST_* variables exported
#                                       # (e.g. scripts/test-services.sh go test ./backends/...)
#
# For each service:
#   1. If its COORDD_TEST_* variable is already set, that server is used as-is.
#   2. Otherwise, if the standard local instance answers (127.0.0.1:3306 as root
#      with no password, 127.0.0.1:5432 as postgres with trust authentication,
#      127.0.0.1:6379, 127.0.0.1:11211), it is used.
#   3. Otherwise a PRIVATE instance is started on 127.0.0.1, on a random free
#      port (never the standard one: another run of this script would take it
#      for a shared server and lose it when this run ends), with its data in a
#      temporary directory; it is stopped and the directory deleted when this
#      script exits. Missing server packages are installed with apt-get when
#      running as root.
#
# Environment:
#   COORDD_TEST_MYSQL_DSN      e.g. root@tcp(127.0.0.1:3306)/   (go-sql-driver/mysql DSN)
#   COORDD_TEST_POSTGRES_DSN   e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
#   COORDD_TEST_REDIS_URL      e.g. redis://127.0.0.1:6379/0
#   COORDD_TEST_MEMCACHED      e.g. 127.0.0.1:11211
#   COORDD_TEST_FORCE_PRIVATE  =1: start private instances even when standard ones answer
#
# It never touches data it did not create: no databases are dropped and Redis is
# never flushed (the tests' own helpers in internal/testenv clean up after
# themselves by name/prefix).

# SC2016: the single-quoted bash -c snippets expand $0/$1 in the child, on purpose.
# SC2317: cleanup/stop_process are reached through the EXIT trap.
# shellcheck disable=SC2016,SC2317

set -euo pipefail

# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------

readonly MYSQL_STD_PORT=3306 POSTGRES_STD_PORT=5432 REDIS_STD_PORT=6379 MEMCACHED_STD_PORT=11211
readonly MYSQL_START_TIMEOUT=90 POSTGRES_START_TIMEOUT=90 REDIS_START_TIMEOUT=20 MEMCACHED_START_TIMEOUT=20 # seconds
readonly STOP_TIMEOUT=30                                                          # seconds
FORCE_PRIVATE=${COORDD_TEST_FORCE_PRIVATE:-0}
[[ $FORCE_PRIVATE == 1 || $FORCE_PRIVATE == true ]] && FORCE_PRIVATE=1 || FORCE_PRIVATE=0

# State, filled in as we go.
WORKDIR=""          # temp dir holding all private instances' data and logs
declare -a PIDS=()  # private server processes to stop on exit
declare -a NAMES=() # their names, for messages
declare -a USED_PORTS=()
PORT=""           # set by pick_port
STATUS=0          # exit status of the test command
CHILD=""          # the test command while it runs (leader of its own process group)
APT_UPDATED=0
OUR_POLICY_RC_D=0   # 1 while we have a temporary /usr/sbin/policy-rc.d installed

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

log() { printf '[test-services] %s\n' "$*" >&2; }
die() {
	printf '[test-services] ERROR: %s\n' "$*" >&2
	exit 1
}
is_root() { [[ $(id -u) -eq 0 ]]; }

# Milliseconds since the epoch (for timing messages).
now_ms() {
	if [[ -n ${EPOCHREALTIME:-} ]]; then
		local t=${EPOCHREALTIME/[.,]/}
		echo $((10#$t / 1000))
	else
		echo $(($(date +%s) * 1000))
	fi
}
since() { # since START_MS -> "1.234s"
	local ms=$(($(now_ms) - $1))
	printf '%d.%03ds' $((ms / 1000)) $((ms % 1000))
}

# find_bin NAME... -> prints the path of the first NAME found in PATH or the sbin
# directories (which non-root PATHs often lack); fails if none is found.
find_bin() {
	local name dir
	for name in "$@"; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return 0
		fi
		for dir in /usr/sbin /usr/local/sbin /sbin /usr/libexec; do
			if [[ -x $dir/$name ]]; then
				echo "$dir/$name"
				return 0
			fi
		done
	done
	return 1
}

# tcp_open HOST PORT: true if something accepts TCP connections there.
tcp_open() {
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

# mysql_client -> path of the mariadb/mysql command-line client, if installed.
mysql_client() { find_bin mariadb mysql 2>/dev/null; }

# mysql_ok HOST PORT: true if a MariaDB/MySQL server there accepts root with an
# empty password. Falls back to `mysqladmin ping`, then a bare TCP check, when
# the client is not installed.
mysql_ok() {
	local host=$1 port=$2 client admin
	tcp_open "$host" "$port" || return 1
	if client=$(mysql_client); then
		"$client" --no-defaults --protocol=TCP -h "$host" -P "$port" -u root \
			--connect-timeout=3 -e 'SELECT 1' </dev/null >/dev/null 2>&1
	elif admin=$(find_bin mariadb-admin mysqladmin 2>/dev/null); then
		# Note: mysqladmin ping succeeds even on "access denied"; it only proves liveness.
		"$admin" --no-defaults --protocol=TCP -h "$host" -P "$port" -u root \
			--connect-timeout=3 ping </dev/null >/dev/null 2>&1
	else
		return 0
	fi
}

# postgres_bin NAME -> path of a PostgreSQL program: PATH, then the newest of
# Debian's /usr/lib/postgresql/<version>/bin.
postgres_bin() {
	local dir
	if command -v "$1" >/dev/null 2>&1; then
		command -v "$1"
		return 0
	fi
	for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		if [[ -x $dir/$1 ]]; then
			echo "$dir/$1"
			return 0
		fi
	done
	return 1
}

# postgres_ok HOST PORT: true if a PostgreSQL server there lets the user
# postgres into the database postgres without a password. Falls back to a
# bare TCP check when psql is not installed.
postgres_ok() {
	local host=$1 port=$2 psql
	tcp_open "$host" "$port" || return 1
	if psql=$(postgres_bin psql); then
		PGCONNECT_TIMEOUT=3 "$psql" -X -w -h "$host" -p "$port" -U postgres -d postgres \
			-Atc 'SELECT 1' </dev/null >/dev/null 2>&1
	else
		return 0
	fi
}

# redis_ok HOST PORT: true if a Redis server there answers PING (without AUTH).
redis_ok() {
	local host=$1 port=$2 cli
	tcp_open "$host" "$port" || return 1
	if cli=$(find_bin redis-cli 2>/dev/null); then
		[[ $(timeout 5 "$cli" -h "$host" -p "$port" ping 2>/dev/null </dev/null) == PONG ]]
	else
		# Speak the protocol directly: PING -> +PONG.
		timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
			printf "PING\r\n" >&3
			IFS= read -r line <&3
			[[ $line == "+PONG"* ]]' "$host" "$port" 2>/dev/null
	fi
}

# memcached_ok HOST PORT: true if a memcached server there answers "version".
memcached_ok() {
	local host=$1 port=$2
	timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
		printf "version\r\n" >&3
		IFS= read -r line <&3
		[[ $line == "VERSION "* ]]' "$host" "$port" 2>/dev/null
}

# port_free PORT: true if nothing listens on PORT and we have not handed it out.
port_free() {
	local port=$1 p
	for p in "${USED_PORTS[@]}"; do [[ $p == "$port" ]] && return 1; done
	tcp_open 127.0.0.1 "$port" && return 1
	if command -v ss >/dev/null 2>&1 && [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]]; then
		return 1
	fi
	return 0
}

# pick_port: sets PORT to a random free port below the kernel's ephemeral
# range, never a standard one (another run of this script, started while
# this one runs, would find a private server there and take it for a shared
# one). (Sets a global rather than printing, because a $(...) subshell would
# lose the USED_PORTS bookkeeping.)
pick_port() {
	local port i
	for ((i = 0; i < 200; i++)); do
		port=$((20000 + RANDOM % 12000))
		port_free "$port" && break
	done
	port_free "$port" || die "could not find a free TCP port on 127.0.0.1"
	USED_PORTS+=("$port")
	PORT=$port
}

# apt_install PKG...: install packages non-interactively (root only). The
# packages' own services are kept from starting (a temporary policy-rc.d) and
# nothing is ever removed (--no-remove) to satisfy them.
apt_install() {
	command -v apt-get >/dev/null 2>&1 ||
		die "need to install: $* — but apt-get is not available; install them with your package manager"
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\n# temporary, from coordd scripts/test-services.sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		OUR_POLICY_RC_D=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	if ((APT_UPDATED == 0)); then
		log "apt-get update"
		apt-get update -q </dev/null >&2 || die "apt-get update failed"
		APT_UPDATED=1
	fi
	log "apt-get install $*"
	apt-get install -y -q --no-install-recommends --no-remove \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"$@" </dev/null >&2 || die "apt-get install $* failed"
	remove_policy_rc_d
}

remove_policy_rc_d() {
	if ((OUR_POLICY_RC_D)); then
		rm -f /usr/sbin/policy-rc.d
		OUR_POLICY_RC_D=0
	fi
}

# show_log FILE: print the end of a server log, for error messages.
show_log() {
	[[ -s $1 ]] || return 0
	printf -- '----- last lines of %s -----\n' "$1" >&2
	tail -n 40 "$1" >&2
	printf -- '-----\n' >&2
}

# wait_ready NAME PID TIMEOUT LOG CHECK...: poll CHECK until it succeeds; fail
# with the server log if the process dies or TIMEOUT seconds pass.
wait_ready() {
	local name=$1 pid=$2 timeout=$3 logf=$4
	shift 4
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			show_log "$logf"
			die "$name exited during startup (server log above)"
		fi
		if ((SECONDS >= deadline)); then
			show_log "$logf"
			die "$name did not become ready within ${timeout}s (server log above)"
		fi
		sleep 0.2
	done
}

# track NAME PID: remember a private server so cleanup stops it.
track() {
	NAMES+=("$1")
	PIDS+=("$2")
}

# cleanup: stop the test command if it is still running (we were signalled),
# stop private servers (TERM, then KILL after STOP_TIMEOUT), delete their temp
# dir, and drop our temporary policy-rc.d. Runs on every exit.
cleanup() {
	local rc=$? i pid
	trap - EXIT INT TERM HUP
	if [[ -n $CHILD ]] && kill -0 "$CHILD" 2>/dev/null; then
		log "stopping the test command (process group $CHILD)"
		stop_process "$CHILD" "test command" group
	fi
	for i in "${!PIDS[@]}"; do
		kill -TERM "${PIDS[$i]}" 2>/dev/null || true
	done
	for i in "${!PIDS[@]}"; do
		stop_process "${PIDS[$i]}" "${NAMES[$i]}"
		log "stopped private ${NAMES[$i]} (pid ${PIDS[$i]})"
	done
	if [[ -n $WORKDIR && -d $WORKDIR ]]; then
		rm -rf -- "$WORKDIR"
	fi
	remove_policy_rc_d
	exit "$rc"
}

# stop_process PID NAME [group]: SIGTERM (the whole process group if asked),
# wait up to STOP_TIMEOUT seconds, then SIGKILL.
stop_process() {
	local pid=$1 name=$2 target=$1 deadline
	[[ ${3:-} == group ]] && target=-$1
	kill -TERM -- "$target" 2>/dev/null || true
	deadline=$((SECONDS + STOP_TIMEOUT))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name (pid $pid) did not stop in ${STOP_TIMEOUT}s; killing it"
		kill -KILL -- "$target" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# run CMD...: run CMD and set STATUS to its exit status. CMD runs in the
# background, in its own session/process group, and we `wait` for it: unlike a
# foreground command, that lets a SIGTERM/SIGINT sent to this script run the
# cleanup trap at once, which then stops CMD's whole process tree (go test and
# the test binaries it spawned) before stopping the servers.
run() {
	log "running: $*"
	if command -v setsid >/dev/null 2>&1; then
		setsid "$@" &
	else
		"$@" &
	fi
	CHILD=$!
	set +e
	wait "$CHILD"
	STATUS=$?
	set -e
	CHILD=""
}

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ensure_workdir: create WORKDIR (once; called directly, never in a subshell,
# so that cleanup knows about it).
ensure_workdir() {
	if [[ -z $WORKDIR ]]; then
		WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/coordd-test-services.XXXXXX")
		chmod 700 "$WORKDIR"
	fi
}

# ---------------------------------------------------------------------------
# Private instances
# ---------------------------------------------------------------------------

start_mariadb() {
	local port=$1 dir server installdb start pid
	ensure_workdir
	dir=$WORKDIR/mariadb
	mkdir -p "$dir/data" "$dir/tmp"
	installdb=$(find_bin mariadb-install-db mysql_install_db) || die "mariadb-install-db not found"
	server=$(find_bin mariadbd mysqld) || die "mariadbd not found"
	local -a user_args=()
	is_root && user_args=(--user=root) # mariadbd refuses to run as root otherwise

	start=$(now_ms)
	# Fresh system tables; root@localhost/127.0.0.1/::1 get an empty password and
	# ALL PRIVILEGES (real grants, so KILL/PROCESS behave as on a normal server).
	local -a install_args=(--no-defaults --datadir="$dir/data" "${user_args[@]}"
		--auth-root-authentication-method=normal)
	if "$installdb" --help 2>/dev/null | grep -q -- '--skip-test-db'; then
		install_args+=(--skip-test-db)
	fi
	"$installdb" "${install_args[@]}" >"$dir/install.log" 2>&1 </dev/null || {
		show_log "$dir/install.log"
		die "mariadb-install-db failed (log above: $dir/install.log)"
	}

	# --no-defaults: ignore /etc/mysql/*; the character set mirrors Debian's packaged config.
	"$server" --no-defaults \
		--datadir="$dir/data" --tmpdir="$dir/tmp" \
		--socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
		--port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
		--log-error="$dir/server.log" "${user_args[@]}" \
		--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
		--max-connections=500 --innodb-flush-log-at-trx-commit=2 \
		</dev/null >>"$dir/server.log" 2>&1 &
	pid=$!
	track MariaDB "$pid"

	wait_ready MariaDB "$pid" "$MYSQL_START_TIMEOUT" "$dir/server.log" mysql_ok 127.0.0.1 "$port"
	log "private MariaDB ready on 127.0.0.1:$port in $(since "$start") (install-db + start; data in $dir)"
}

# as_postgres CMD...: run CMD as the system user postgres when root
# (PostgreSQL refuses to run as root), else as ourselves.
as_postgres() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_postgres() {
	local port=$1 dir initdb server start pid
	ensure_workdir
	dir=$WORKDIR/postgres
	mkdir -p "$dir"
	initdb=$(postgres_bin initdb) || die "initdb not found"
	server=$(postgres_bin postgres) || die "postgres not found"
	if is_root; then
		id postgres >/dev/null 2>&1 || die "the system user postgres is missing (install postgresql)"
		chmod 711 "$WORKDIR"
		chown postgres: "$dir"
	fi
	start=$(now_ms)
	as_postgres "$initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C \
		>"$dir/initdb.log" 2>&1 </dev/null || {
		show_log "$dir/initdb.log"
		die "initdb failed (log above: $dir/initdb.log)"
	}
	# fsync off: a crash of the server (not of the machine) loses nothing
	# committed; these are throwaway test clusters.
	as_postgres "$server" -D "$dir/data" -p "$port" -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories="$dir" -c max_connections=500 -c fsync=off \
		</dev/null >"$dir/server.log" 2>&1 &
	pid=$!
	track PostgreSQL "$pid"
	wait_ready PostgreSQL "$pid" "$POSTGRES_START_TIMEOUT" "$dir/server.log" postgres_ok 127.0.0.1 "$port"
	log "private PostgreSQL ready on 127.0.0.1:$port in $(since "$start") (initdb + start; data in $dir)"
}

start_redis() {
	local port=$1 dir server start pid
	ensure_workdir
	dir=$WORKDIR/redis
	mkdir -p "$dir"
	server=$(find_bin redis-server) || die "redis-server not found"
	start=$(now_ms)
	"$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
		--daemonize no </dev/null >"$dir/server.log" 2>&1 &
	pid=$!
	track Redis "$pid"
	wait_ready Redis "$pid" "$REDIS_START_TIMEOUT" "$dir/server.log" redis_ok 127.0.0.1 "$port"
	log "private Redis ready on 127.0.0.1:$port in $(since "$start")"
}

start_memcached() {
	local port=$1 dir server start pid
	ensure_workdir
	dir=$WORKDIR/memcached
	mkdir -p "$dir"
	server=$(find_bin memcached) || die "memcached not found"
	local -a user_args=()
	is_root && user_args=(-u root) # memcached refuses to run as root otherwise
	start=$(now_ms)
	"$server" -l 127.0.0.1 -p "$port" -U 0 "${user_args[@]}" </dev/null >"$dir/server.log" 2>&1 &
	pid=$!
	track memcached "$pid"
	wait_ready memcached "$pid" "$MEMCACHED_START_TIMEOUT" "$dir/server.log" memcached_ok 127.0.0.1 "$port"
	log "private memcached ready on 127.0.0.1:$port in $(since "$start")"
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v go >/dev/null 2>&1 || die "go is not installed (see https://go.dev/doc/install)"

# 1. Decide, per service, whether we must start a private instance.
need_mysql=0 need_postgres=0 need_redis=0 need_memcached=0
if [[ -n ${COORDD_TEST_MYSQL_DSN:-} ]]; then
	log "MariaDB/MySQL: using COORDD_TEST_MYSQL_DSN from the environment"
elif ((!FORCE_PRIVATE)) && mysql_ok 127.0.0.1 "$MYSQL_STD_PORT"; then
	log "MariaDB/MySQL: using the running server on 127.0.0.1:$MYSQL_STD_PORT"
	export COORDD_TEST_MYSQL_DSN="root@tcp(127.0.0.1:$MYSQL_STD_PORT)/"
else
	need_mysql=1
fi
if [[ -n ${COORDD_TEST_POSTGRES_DSN:-} ]]; then
	log "PostgreSQL: using COORDD_TEST_POSTGRES_DSN from the environment"
elif ((!FORCE_PRIVATE)) && postgres_ok 127.0.0.1 "$POSTGRES_STD_PORT"; then
	log "PostgreSQL: using the running server on 127.0.0.1:$POSTGRES_STD_PORT"
	export COORDD_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$POSTGRES_STD_PORT/postgres?sslmode=disable"
else
	need_postgres=1
fi
if [[ -n ${COORDD_TEST_REDIS_URL:-} ]]; then
	log "Redis: using COORDD_TEST_REDIS_URL from the environment"
elif ((!FORCE_PRIVATE)) && redis_ok 127.0.0.1 "$REDIS_STD_PORT"; then
	log "Redis: using the running server on 127.0.0.1:$REDIS_STD_PORT"
	export COORDD_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_STD_PORT/0"
else
	need_redis=1
fi
if [[ -n ${COORDD_TEST_MEMCACHED:-} ]]; then
	log "memcached: using COORDD_TEST_MEMCACHED from the environment"
elif ((!FORCE_PRIVATE)) && memcached_ok 127.0.0.1 "$MEMCACHED_STD_PORT"; then
	log "memcached: using the running server on 127.0.0.1:$MEMCACHED_STD_PORT"
	export COORDD_TEST_MEMCACHED="127.0.0.1:$MEMCACHED_STD_PORT"
else
	need_memcached=1
fi

# 2. Collect missing packages: servers we must start, a C compiler for -race
#    and Chromium for the dashboard's browser tests.
declare -a missing=()
if ((need_mysql)); then
	{ find_bin mariadbd mysqld && find_bin mariadb-install-db mysql_install_db; } >/dev/null 2>&1 ||
		missing+=(mariadb-server)
fi
if ((need_postgres)); then
	{ postgres_bin initdb && postgres_bin postgres && postgres_bin psql; } >/dev/null 2>&1 ||
		missing+=(postgresql)
fi
((need_redis)) && ! find_bin redis-server >/dev/null && missing+=(redis-server)
((need_memcached)) && ! find_bin memcached >/dev/null && missing+=(memcached)
if (($# == 0)); then
	# go test -race needs cgo, hence a C compiler.
	cc=$(go env CC 2>/dev/null || true)
	command -v "${cc:-gcc}" >/dev/null 2>&1 || missing+=(gcc libc6-dev)
	# The dashboard's tests drive a real headless Chromium (internal/browsertest).
	find_bin chromium chromium-browser google-chrome >/dev/null 2>&1 || missing+=(chromium)
fi

if ((${#missing[@]})); then
	if is_root; then
		apt_install "${missing[@]}"
	else
		die "not running as root, so cannot install: ${missing[*]}
    Install them with:  sudo apt-get install -y --no-install-recommends ${missing[*]}
    (or point COORDD_TEST_MYSQL_DSN / COORDD_TEST_POSTGRES_DSN / COORDD_TEST_REDIS_URL / COORDD_TEST_MEMCACHED at servers you run yourself)"
	fi
fi

# 3. Start private instances. Ports are chosen only now, after any package
#    installation, in case a package's service grabbed a standard port anyway.
if ((need_mysql)); then
	((FORCE_PRIVATE)) || log "MariaDB/MySQL: nothing usable on 127.0.0.1:$MYSQL_STD_PORT (root, no password); starting a private instance"
	pick_port
	start_mariadb "$PORT"
	export COORDD_TEST_MYSQL_DSN="root@tcp(127.0.0.1:$PORT)/"
fi
if ((need_postgres)); then
	((FORCE_PRIVATE)) || log "PostgreSQL: nothing usable on 127.0.0.1:$POSTGRES_STD_PORT (postgres, trust); starting a private instance"
	pick_port
	start_postgres "$PORT"
	export COORDD_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
fi
if ((need_redis)); then
	((FORCE_PRIVATE)) || log "Redis: nothing usable on 127.0.0.1:$REDIS_STD_PORT; starting a private instance"
	pick_port
	start_redis "$PORT"
	export COORDD_TEST_REDIS_URL="redis://127.0.0.1:$PORT/0"
fi
if ((need_memcached)); then
	((FORCE_PRIVATE)) || log "memcached: nothing on 127.0.0.1:$MEMCACHED_STD_PORT; starting a private instance"
	pick_port
	start_memcached "$PORT"
	export COORDD_TEST_MEMCACHED="127.0.0.1:$PORT"
fi

log "COORDD_TEST_MYSQL_DSN=$COORDD_TEST_MYSQL_DSN"
log "COORDD_TEST_POSTGRES_DSN=$COORDD_TEST_POSTGRES_DSN"
log "COORDD_TEST_REDIS_URL=$COORDD_TEST_REDIS_URL"
log "COORDD_TEST_MEMCACHED=$COORDD_TEST_MEMCACHED"

# 4. Run the tests (or the given command). The EXIT trap stops the private
#    servers afterwards; the script exits with the command's status.
if (($#)); then
	run "$@"
else
	log "go vet ./..."
	go vet ./...
	run go test -race -count=1 -timeout 25m ./...
fi
exit "$STATUS"
