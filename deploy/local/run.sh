#!/usr/bin/env bash
# Runs the local stack in the foreground on local defaults: devkafka (unless a
# broker already answers at KAFKA_BROKERS), the archiver, the detector and the
# limiter. When Redis or Postgres does not answer at its URL, a private
# instance is started under .local/run/ (git-ignored) if its server is
# installed; if not, the script stops and says what to install. Ctrl-C stops
# everything it started. Binaries come from `make build` (bin/).
set -euo pipefail
cd "$(dirname "$0")/../.."

export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable}
export LOG_FORMAT=${LOG_FORMAT:-console}
LIMITER_ADDR=${LIMITER_ADDR:-127.0.0.1:8080}
state=.local/run

# The limiter decides only for callers with one of API_TOKENS. Unless you
# set it, this run makes one up and keeps it in $state/api-token (readable by
# you alone) for curl and make demo.
token_hint="\$(cat $state/api-token)"
if [ -z "${API_TOKENS:-}" ]; then
	mkdir -p "$state"
	API_TOKENS=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	(umask 077 && printf '%s\n' "$API_TOKENS" >"$state/api-token")
else
	token_hint="<one of your API_TOKENS>"
fi
export API_TOKENS

# Children run in sessions of their own (setsid), so Ctrl-C reaches only this
# script, which stops them one by one.
pids=()
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

# answers HOST:PORT: true when something accepts TCP connections there.
answers() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

wait_for() {
	for _ in $(seq 100); do
		answers "$1" && return 0
		sleep 0.1
	done
	echo "run: $2 did not start listening on $1" >&2
	exit 1
}

broker=${KAFKA_BROKERS%%,*}
if answers "$broker"; then
	echo "run: using the Kafka broker at $KAFKA_BROKERS"
else
	echo "run: no broker at $broker, starting devkafka"
	LISTEN_ADDR=$broker setsid bin/devkafka &
	pids+=($!)
	wait_for "$broker" devkafka
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
	pids+=($!)
	wait_for "$redis_addr" redis-server
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
	pids+=($!)
	wait_for "$pg_addr" postgres
fi

ARCHIVER_ADDR=${ARCHIVER_ADDR:-127.0.0.1:8082}
# The archiver creates the database and its schema at start.
LISTEN_ADDR=$ARCHIVER_ADDR setsid bin/archiver &
pids+=($!)
wait_for "$ARCHIVER_ADDR" archiver

DETECTOR_ADDR=${DETECTOR_ADDR:-127.0.0.1:8081}
LISTEN_ADDR=$DETECTOR_ADDR setsid bin/detector &
pids+=($!)
wait_for "$DETECTOR_ADDR" detector

# Envoy's rate limit API on GRPC_LISTEN_ADDR (default :8083), with the
# descriptor rules of the Envoy recipe (envoyproxy/ratelimit's format).
LISTEN_ADDR=$LIMITER_ADDR RLS_CONFIG_DIR=${RLS_CONFIG_DIR:-deploy/gateways/envoy/rls} setsid bin/limiter &
pids+=($!)
wait_for "$LIMITER_ADDR" limiter

cat <<MSG

ratewarden is running. Try:
  curl -s -H "Authorization: Bearer $token_hint" -X POST http://$LIMITER_ADDR/v1/check -d '{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST"}'
  curl -s -H "Authorization: Bearer $token_hint" -X POST http://$LIMITER_ADDR/json -d '{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}'
  curl -s http://$LIMITER_ADDR/readyz
  curl -s http://$DETECTOR_ADDR/metrics | grep rate_limit_detector_bans_total
Press Ctrl-C to stop.

MSG
wait -n "${pids[@]}"
