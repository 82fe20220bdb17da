#!/usr/bin/env bash
# Runs the local stack in the foreground on local defaults: devkafka (unless a
# broker already answers at KAFKA_BROKERS), the archiver, the notifier when
# NOTIFY_RECEIVERS_FILE names its receivers (a local run has no webhook to
# post to otherwise), the detector, the limiter and the console. When Redis or Postgres does not answer at its URL, a private
# instance is started under .local/run/ (git-ignored) if its server is
# installed; if not, the script stops and says what to install. Everything
# listens on 127.0.0.1 unless you say otherwise; the tokens are made once,
# in .local/run/, and kept. Ctrl-C stops everything it started. Binaries
# come from `make build` (bin/).
set -euo pipefail
cd "$(dirname "$0")/../.."

export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable}
export LOG_FORMAT=${LOG_FORMAT:-console}
# Every listener on the loopback interface: a local run is not a deployment,
# and the limiter's gRPC default (:8083) would listen on every interface.
LIMITER_ADDR=${LIMITER_ADDR:-127.0.0.1:8080}
DETECTOR_ADDR=${DETECTOR_ADDR:-127.0.0.1:8081}
ARCHIVER_ADDR=${ARCHIVER_ADDR:-127.0.0.1:8082}
NOTIFIER_ADDR=${NOTIFIER_ADDR:-127.0.0.1:8084}
CONSOLE_ADDR=${CONSOLE_ADDR:-127.0.0.1:8085}
export GRPC_LISTEN_ADDR=${GRPC_LISTEN_ADDR:-127.0.0.1:8083}
state=.local/run
mkdir -p "$state"

# token_file NAME: the token kept in $state/NAME, made on the first run
# (random, readable by you alone) and reused after, so a gateway or a shell
# given it keeps working across runs. A file edited into something the
# limiter refuses stops the run here, naming the file.
token_file() {
	local file=$state/$1 tmp
	if [ ! -e "$file" ]; then
		tmp=$(umask 077 && mktemp "$file.XXXXXX")
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp"
		echo >>"$tmp"
		# ln fails when another run made the file meanwhile: theirs is kept.
		ln "$tmp" "$file" 2>/dev/null || true
		rm -f "$tmp"
	fi
	chmod 600 "$file"
	local token
	token=$(<"$file")
	if [ "${#token}" -lt 16 ] || [ -n "$(printf '%s' "$token" | LC_ALL=C tr -d '\041-\053\055-\176')" ] ||
		[[ ${token,,} == *change-me* || ${token,,} == *changeme* || ${token,,} == *replace-me* || ${token,,} == *replaceme* ]]; then
		echo "run: $PWD/$file is not a token the limiter accepts (16 or more printable ASCII characters, no comma, no placeholder): delete it and the next run makes a new one" >&2
		exit 1
	fi
	printf '%s' "$token"
}

# The limiter decides only for callers with one of API_TOKENS and opens its
# admin API to ADMIN_TOKEN. Unless you set them, the tokens of
# $state/api-token and $state/admin-token are used; the curl lines printed
# below read those files, from any directory.
api_token_file=$PWD/$state/api-token
admin_token_file=$PWD/$state/admin-token
if [ -z "${API_TOKENS:-}" ]; then
	API_TOKENS=$(token_file api-token)
	api_hint="\$(cat $(printf '%q' "$api_token_file"))"
	api_from="API token:   $api_token_file"
else
	api_hint="<one of your API_TOKENS>"
	api_from="API token:   one of your API_TOKENS"
fi
if [ -z "${ADMIN_TOKEN:-}" ]; then
	ADMIN_TOKEN=$(token_file admin-token)
	admin_hint="\$(cat $(printf '%q' "$admin_token_file"))"
	admin_from="admin token: $admin_token_file"
else
	admin_hint="<your ADMIN_TOKEN>"
	admin_from="admin token: your ADMIN_TOKEN"
fi
export API_TOKENS ADMIN_TOKEN

# The console reads the admin token from a file: the one above, or one of
# the ADMIN_TOKEN you set. Its users file is made on the first run with one
# operator, "operator", whose password is kept in $state/console-password.
if [ "$admin_from" = "admin token: $admin_token_file" ]; then
	console_token_file=$admin_token_file
else
	console_token_file=$PWD/$state/console-admin-token
	(umask 077 && printf '%s\n' "$ADMIN_TOKEN" >"$console_token_file")
fi
console_users=$PWD/$state/console-users
console_password=$PWD/$state/console-password
if [ ! -e "$console_users" ]; then
	(umask 077 && token_file console-password >/dev/null &&
		bin/console user operator operator <"$console_password" >"$console_users")
fi

# Children run in sessions of their own (setsid), so Ctrl-C reaches only this
# script, which stops them one by one.
pids=()
names=() # of pids, for the message when one exits
stop() {
	trap - INT TERM EXIT
	# Reverse start order: the limiter flushes its events before the broker goes.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
}
trap stop EXIT
trap "stop; exit 0" INT TERM

# answers HOST:PORT: true when something accepts TCP connections there (an
# empty host is this machine).
answers() {
	local host=${1%:*}
	(exec 3<>"/dev/tcp/${host:-127.0.0.1}/${1##*:}") 2>/dev/null
}

# wait_for ADDR NAME PID [LOG]: waits until NAME, started as PID, listens on
# ADDR. When PID exits first, it stops the run at once, showing the end of
# LOG (or saying that NAME's output is above).
wait_for() {
	local addr=$1 name=$2 pid=$3 log=${4:-} status=0
	for _ in $(seq 600); do
		answers "$addr" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || status=$?
			if [ -n "$log" ]; then
				echo "run: $name exited (status $status) before listening on $addr; the end of $PWD/$log:" >&2
				tail -n 20 "$log" >&2
			else
				echo "run: $name exited (status $status) before listening on $addr; its output is above" >&2
			fi
			exit 1
		fi
		sleep 0.1
	done
	echo "run: $name did not start listening on $addr within 60 s" >&2
	exit 1
}

# Something already listening where a service of this run would is most
# likely another make run: the service would fail to start, or worse, this
# run would talk to the other one.
listeners=("LIMITER_ADDR=$LIMITER_ADDR" "GRPC_LISTEN_ADDR=$GRPC_LISTEN_ADDR" "DETECTOR_ADDR=$DETECTOR_ADDR" "ARCHIVER_ADDR=$ARCHIVER_ADDR" "CONSOLE_ADDR=$CONSOLE_ADDR")
if [ -n "${NOTIFY_RECEIVERS_FILE:-}" ]; then listeners+=("NOTIFIER_ADDR=$NOTIFIER_ADDR"); fi
for pair in "${listeners[@]}"; do
	addr=${pair#*=}
	if [ "$addr" != off ] && answers "$addr"; then
		echo "run: something already listens on $addr (${pair%%=*}): stop it (another make run?) or set ${pair%%=*}" >&2
		exit 1
	fi
done

broker=${KAFKA_BROKERS%%,*}
if answers "$broker"; then
	echo "run: using the Kafka broker at $KAFKA_BROKERS"
else
	echo "run: no broker at $broker, starting devkafka"
	LISTEN_ADDR=$broker setsid bin/devkafka &
	pids+=($!) names+=(devkafka)
	wait_for "$broker" devkafka $!
fi

# missing NAME ADDR PACKAGES: stops the script, saying that nothing answers at
# ADDR and NAME is not installed, and what to install instead.
missing() {
	echo "run: nothing answers at $2 and $1 is not installed: apt-get install $3 (or run the whole stack with: docker compose up)" >&2
	exit 1
}

redis_addr=$(sed -E 's#^rediss?://([^@/]*@)?([^/?]+).*#\2#' <<<"$REDIS_URL")
if ! answers "$redis_addr"; then
	command -v redis-server >/dev/null || missing redis-server "$redis_addr (REDIS_URL)" redis-server
	echo "run: no Redis at $redis_addr, starting a private redis-server in $state/redis"
	mkdir -p "$state/redis"
	setsid redis-server --bind "${redis_addr%:*}" --port "${redis_addr##*:}" --dir "$state/redis" --save "" --appendonly no \
		--logfile "$PWD/$state/redis/redis.log" &
	pids+=($!) names+=(redis-server)
	wait_for "$redis_addr" redis-server $! "$state/redis/redis.log"
fi

pg_addr=$(sed -E 's#^postgres(ql)?://([^@/]*@)?([^/?]+).*#\3#' <<<"$DATABASE_URL")
if ! answers "$pg_addr"; then
	pg_bin=$(dirname "$( (command -v initdb || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null) | sort -V | tail -1)")
	[ -x "$pg_bin/postgres" ] || missing PostgreSQL "$pg_addr (DATABASE_URL)" postgresql
	echo "run: no Postgres at $pg_addr, starting a private one in $state/postgres"
	# PostgreSQL refuses to run as root: then it runs as the postgres user.
	as_pg=()
	if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
	mkdir -p "$state/postgres"
	[ "$(id -u)" != 0 ] || chown postgres "$state/postgres"
	if [ ! -s "$state/postgres/data/PG_VERSION" ]; then
		"${as_pg[@]}" "$pg_bin/initdb" -D "$state/postgres/data" -U postgres --auth=trust >"$state/postgres/initdb.log" 2>&1 ||
			{ cat "$state/postgres/initdb.log" >&2; exit 1; }
	fi
	setsid "${as_pg[@]}" "$pg_bin/postgres" -D "$PWD/$state/postgres/data" -p "${pg_addr##*:}" -c listen_addresses="${pg_addr%:*}" \
		-k "$PWD/$state/postgres" >>"$state/postgres/postgres.log" 2>&1 &
	pids+=($!) names+=(postgres)
	wait_for "$pg_addr" postgres $! "$state/postgres/postgres.log"
fi

# The archiver creates the database and its schema at start.
LISTEN_ADDR=$ARCHIVER_ADDR setsid bin/archiver &
pids+=($!) names+=(archiver)
wait_for "$ARCHIVER_ADDR" archiver $!

# The notifier posts the bans and warnings to the webhooks of
# NOTIFY_RECEIVERS_FILE (docs/ban-notifications.md); without it, none.
notifier_line=""
if [ -n "${NOTIFY_RECEIVERS_FILE:-}" ]; then
	LISTEN_ADDR=$NOTIFIER_ADDR setsid bin/notifier &
	pids+=($!) names+=(notifier)
	wait_for "$NOTIFIER_ADDR" notifier $!
	notifier_line="  notifier: $NOTIFIER_ADDR, receivers in $NOTIFY_RECEIVERS_FILE"
fi

LISTEN_ADDR=$DETECTOR_ADDR setsid bin/detector &
pids+=($!) names+=(detector)
wait_for "$DETECTOR_ADDR" detector $!

# Envoy's rate limit API on GRPC_LISTEN_ADDR, with the descriptor rules of
# the Envoy recipe (envoyproxy/ratelimit's format).
LISTEN_ADDR=$LIMITER_ADDR RLS_CONFIG_DIR=${RLS_CONFIG_DIR:-deploy/gateways/envoy/rls} setsid bin/limiter &
pids+=($!) names+=(limiter)
wait_for "$LIMITER_ADDR" limiter $!

# url ADDR: the URL of ADDR from this machine (an empty host is all of them).
url() {
	local host=${1%:*}
	echo "http://${host:-127.0.0.1}:${1##*:}"
}
api=$(url "$LIMITER_ADDR")

# The console reads the archive as ratewarden_reader and acts through the
# limiter's admin API.
LISTEN_ADDR=$CONSOLE_ADDR CONSOLE_ADMIN_URL=$api CONSOLE_ADMIN_TOKEN_FILE=$console_token_file \
	CONSOLE_USERS_FILE=$console_users setsid bin/console &
pids+=($!) names+=(console)
wait_for "$CONSOLE_ADDR" console $!
console=$(url "$CONSOLE_ADDR")
# The lines below work as printed, from any directory. The ban is of an
# address the others do not use, so they keep answering as shown.
cat <<MSG

ratewarden is running.
  $api_from
  $admin_from
  gRPC (Envoy's rate limit API): $GRPC_LISTEN_ADDR${notifier_line:+
$notifier_line}
  console:     $console (user operator, password in $console_password; users in $console_users)
Try:
  curl -s -H "Authorization: Bearer $api_hint" -X POST $api/v1/check -d '{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST"}'
  curl -s -H "Authorization: Bearer $api_hint" -X POST $api/v1/report -d '{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"alice","status":401}'
  curl -s -H "Authorization: Bearer $api_hint" -X POST $api/json -d '{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}'
  curl -s -H "Authorization: Bearer $admin_hint" -X POST $api/v1/admin/bans -d '{"scope":"ip","subject":"198.51.100.9","duration":"10m","reason":"trying the admin API"}'
  curl -s -H "Authorization: Bearer $admin_hint" $api/v1/admin/bans
  curl -s $api/readyz
  curl -s $console/readyz
  curl -s $(url "$DETECTOR_ADDR")/metrics | grep rate_limit_detector_bans_total
Press Ctrl-C to stop.

MSG
status=0
wait -n "${pids[@]}" || status=$?
for i in "${!pids[@]}"; do
	kill -0 "${pids[i]}" 2>/dev/null || echo "run: ${names[i]} exited (status $status); stopping the rest" >&2
done
exit "$status"
