#!/usr/bin/env bash
# make demo: the local stack (make run) under synthetic gateway traffic from
# cmd/loadgen: normal users, one brute forcer and one scanner; then the
# logins of cmd/loginsim, with their outcomes reported: a credential-stuffing
# botnet, a distributed attack on one account and normal users with typos.
# It shows the traffic live, each ban as it arrives on the ban topic (kcat),
# and the analysts' views in Postgres (psql), then stops by itself.
# Needs kcat and psql (Debian: apt-get install kcat postgresql-client).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-30s}
RATE=${RATE:-300}
export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable}
export LIMITER_ADDR=${LIMITER_ADDR:-127.0.0.1:8080}
export LOG_LEVEL=${LOG_LEVEL:-warn}
# The gateway's token: the stack's limiter requires it (run.sh), loadgen sends it.
export API_TOKENS=${API_TOKENS:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
BANS_TOPIC=${BANS_TOPIC:-ratelimit.bans}

for tool in kcat psql curl; do
	command -v "$tool" >/dev/null || { echo "demo: $tool not found (Debian: apt-get install kcat postgresql-client curl)" >&2; exit 1; }
done

mkdir -p .local/run
log=.local/run/demo-stack.log
stack=
watcher=
finish() {
	trap - EXIT INT TERM
	[ -z "$watcher" ] || { kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; }
	if [ -n "$stack" ]; then
		echo "demo: stopping the stack"
		kill -TERM "$stack" 2>/dev/null || true # a background job ignores SIGINT
		wait "$stack" 2>/dev/null || true
	fi
}
trap finish EXIT
trap "finish; exit 130" INT TERM

# Counters, windows and bans of this run only: a demo run again within the
# hour would otherwise find its attackers still banned from the last one.
export REDIS_KEY_PREFIX=${REDIS_KEY_PREFIX:-demo$(date +%s):}
# The rules of the example file, but for credential stuffing: the demo's bots
# try 3 accounts each from their address, under the default of 10.
export RULES_FILE=.local/run/demo-rules.yaml
sed 's/credential_stuffing: {distinct_users: 10,/credential_stuffing: {distinct_users: 2,/' deploy/rules.example.yaml >"$RULES_FILE"
grep -q 'distinct_users: 2,' "$RULES_FILE" || { echo "demo: deploy/rules.example.yaml has no credential_stuffing line to lower" >&2; exit 1; }

echo "demo: starting the stack (log: $log)"
deploy/local/run.sh >"$log" 2>&1 &
stack=$!
for _ in $(seq 300); do
	curl -fs "http://$LIMITER_ADDR/readyz" >/dev/null 2>&1 && break
	kill -0 "$stack" 2>/dev/null || { echo "demo: the stack did not start:" >&2; tail -20 "$log" >&2; exit 1; }
	sleep 0.1
done

# Bans as the detector publishes them (from the end of the topic: this run's).
kcat -q -C -u -b "${KAFKA_BROKERS%%,*}" -t "$BANS_TOPIC" -o end \
	-f '\n>>> ban on %t: %s\n\n' 2>/dev/null &
watcher=$!
sleep 1

echo "demo: $DURATION of traffic at $RATE requests/s: normal users, a brute forcer on /api/login, a scanner"
bin/loadgen -url "http://$LIMITER_ADDR" -token "${API_TOKENS%%,*}" -rate "$RATE" -workers 16 -duration "$DURATION" -progress 2s \
	-mix normal=80,bruteforce=10,scanner=10 -attackers 1 -max-errors 1 || true

echo
echo "demo: logins with their outcomes reported (POST /v1/report): 200 bots failing 3 times each on accounts of"
echo "      their own, 30 addresses failing twice each on the account 'victim', 50 normal users with typos"
bin/loginsim -url "http://$LIMITER_ADDR" -token "${API_TOKENS%%,*}" -rate 150 || true

sleep 3 # the archiver flushes at least every second
echo
echo "demo: what analysts see in Postgres"
for view in top_offenders_1h violations_per_endpoint_hourly failures_per_endpoint_hourly failures_per_source_1h active_bans; do
	echo
	echo "== $view"
	psql "$DATABASE_URL" -X -q -P pager=off -c "SELECT * FROM $view LIMIT 5" || true
done
