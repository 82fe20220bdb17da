#!/usr/bin/env bash
# Runs the local stack in the foreground on local defaults: devkafka (unless a
# broker already answers at KAFKA_BROKERS), the archiver (when Postgres answers
# at DATABASE_URL), the detector and the limiter. Ctrl-C stops
# everything cleanly. Binaries come from `make build` (bin/).
set -euo pipefail
cd "$(dirname "$0")/../.."

export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable}
export LOG_FORMAT=${LOG_FORMAT:-console}
LIMITER_ADDR=${LIMITER_ADDR:-127.0.0.1:8080}

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

redis_addr=$(sed -E 's#^rediss?://([^@/]*@)?([^/?]+).*#\2#' <<<"$REDIS_URL")
if ! answers "$redis_addr"; then
	echo "run: warning: no Redis answers at $redis_addr (REDIS_URL); rules follow their on_redis_failure policy" >&2
	echo "run: start one with: redis-server --port ${redis_addr##*:} --save ''   (Debian: apt-get install redis-server)" >&2
fi

ARCHIVER_ADDR=${ARCHIVER_ADDR:-127.0.0.1:8082}
pg_addr=$(sed -E 's#^postgres(ql)?://([^@/]*@)?([^/?]+).*#\3#' <<<"$DATABASE_URL")
if answers "$pg_addr"; then
	# The archiver creates the database and its schema at start.
	LISTEN_ADDR=$ARCHIVER_ADDR setsid bin/archiver &
	pids+=($!)
	wait_for "$ARCHIVER_ADDR" archiver
else
	echo "run: warning: no Postgres answers at $pg_addr (DATABASE_URL): the archiver is not started" >&2
	echo "run: start one with: pg_ctlcluster 15 main start   (Debian: apt-get install postgresql)" >&2
fi

DETECTOR_ADDR=${DETECTOR_ADDR:-127.0.0.1:8081}
LISTEN_ADDR=$DETECTOR_ADDR setsid bin/detector &
pids+=($!)
wait_for "$DETECTOR_ADDR" detector

LISTEN_ADDR=$LIMITER_ADDR setsid bin/limiter &
pids+=($!)
wait_for "$LIMITER_ADDR" limiter

cat <<MSG

ratewarden is running. Try:
  curl -s -X POST http://$LIMITER_ADDR/v1/check -d '{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST"}'
  curl -s http://$LIMITER_ADDR/readyz
  curl -s http://$DETECTOR_ADDR/metrics | grep rate_limit_detector_bans_total
Press Ctrl-C to stop.

MSG
wait -n "${pids[@]}"
