#!/usr/bin/env bash
# make demo: the local stack (make run) under synthetic traffic, told as a
# story in five parts:
#  1. gateway traffic from cmd/loadgen (normal users, one brute forcer, one
#     scanner) and what the limiter refused of it;
#  2. the logins of cmd/loginsim, with their outcomes reported: a
#     credential-stuffing botnet, a distributed attack on one account and
#     normal users with typos;
#  3. who got banned and why: the ban topic (kcat, into a file) summarized
#     by scenario with cmd/bansummary;
#  4. that the bans stop the attackers: they try again, and loginsim counts
#     the attempts refused after each address's ban;
#  5. what analysts see: the views in Postgres (psql), most first.
# It stops by itself. The rows go to a database of their own (ratewarden_demo
# beside make run's ratewarden), dropped when the next demo starts, and the
# Redis keys under a prefix of their own.
# Needs kcat and psql (Debian: apt-get install kcat postgresql-client).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-30s}
RATE=${RATE:-300}
export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
export LIMITER_ADDR=${LIMITER_ADDR:-127.0.0.1:8080}
export LOG_LEVEL=${LOG_LEVEL:-warn}
# The gateway's token: the stack's limiter requires it (run.sh), loadgen sends it.
export API_TOKENS=${API_TOKENS:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
BANS_TOPIC=${BANS_TOPIC:-ratelimit.bans}

for tool in kcat psql curl; do
	command -v "$tool" >/dev/null || { echo "demo: $tool not found (Debian: apt-get install kcat postgresql-client curl)" >&2; exit 1; }
done

# The demo's rows go to a database of their own, named after make run's with
# _demo added, so that make run's violations, bans and active_bans never
# list the demo's attackers, whose bans no running limiter enforces.
base_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable}
url_re='^(postgres(ql)?://[^/?]*/)([^?]*)(.*)$'
[[ $base_url =~ $url_re ]] || { echo "demo: DATABASE_URL is not a postgres:// URL naming a database: $base_url" >&2; exit 1; }
base_db=${BASH_REMATCH[3]:-postgres}
demo_db=${base_db%_demo}_demo
export DATABASE_URL=${BASH_REMATCH[1]}$demo_db${BASH_REMATCH[4]}
admin_url=${BASH_REMATCH[1]}postgres${BASH_REMATCH[4]}

mkdir -p .local/run
log=.local/run/demo-stack.log
bans=.local/run/demo-bans.json
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

# The last demo's rows go now, not when it ended: they stay for querying
# until then. When Postgres does not answer yet (run.sh starts a private
# one), they are emptied once the stack is up, before any traffic.
dropped=
if psql "$admin_url" -X -q -A -t -c 'SELECT 1' >/dev/null 2>&1; then
	if ! PGOPTIONS='-c client_min_messages=warning' psql "$admin_url" -X -q -c "DROP DATABASE IF EXISTS \"$demo_db\""; then
		echo "demo: could not drop the last demo's database $demo_db (is a demo still running?)" >&2
		exit 1
	fi
	dropped=1
fi

# Counters, windows and bans of this run only: a demo run again within the
# hour would otherwise find its attackers still banned from the last one.
export REDIS_KEY_PREFIX=${REDIS_KEY_PREFIX:-demo$(date +%s):}
# The rules of the example file, but for credential stuffing: the demo's bots
# try 3 accounts each from their address, under the default of 10.
export RULES_FILE=.local/run/demo-rules.yaml
sed 's/credential_stuffing: {distinct_users: 10,/credential_stuffing: {distinct_users: 2,/' deploy/rules.example.yaml >"$RULES_FILE"
grep -q 'distinct_users: 2,' "$RULES_FILE" || { echo "demo: deploy/rules.example.yaml has no credential_stuffing line to lower" >&2; exit 1; }

echo "demo: starting the stack (log: $log; database: $demo_db)"
start_ms=$(($(date +%s%N) / 1000000))
deploy/local/run.sh >"$log" 2>&1 &
stack=$!
for _ in $(seq 300); do
	curl -fs "http://$LIMITER_ADDR/readyz" >/dev/null 2>&1 && break
	kill -0 "$stack" 2>/dev/null || { echo "demo: the stack did not start:" >&2; tail -20 "$log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$dropped" ] || psql "$DATABASE_URL" -X -q -c 'TRUNCATE bans, rate_limit_violations, outcomes, dead_letters' >/dev/null

# The ban topic from the start of this run (a broker already running may hold
# older messages), one JSON value a line, for bansummary.
kcat -q -C -u -b "${KAFKA_BROKERS%%,*}" -t "$BANS_TOPIC" -o "s@$start_ms" -f '%s\n' >"$bans" 2>/dev/null &
watcher=$!

# settle FILE: waits until FILE has stopped growing for 2 s (20 s at most):
# the detector is done with what it was sent.
settle() {
	local last=-1 same=0 n
	for _ in $(seq 40); do
		n=$(wc -l <"$1")
		if [ "$n" = "$last" ]; then
			same=$((same + 1))
			[ "$same" -lt 4 ] || return 0
		else
			same=0 last=$n
		fi
		sleep 0.5
	done
}

echo
echo "=== 1. Gateway traffic: $DURATION at $RATE requests/s of normal users, a brute forcer on /api/login, a scanner"
bin/loadgen -url "http://$LIMITER_ADDR" -token "${API_TOKENS%%,*}" -rate "$RATE" -workers 16 -duration "$DURATION" -progress 5s \
	-mix normal=80,bruteforce=10,scanner=10 -attackers 1 -max-errors 1 || true

echo
echo "=== 2. Logins with their outcomes reported (POST /v1/report): 200 bots failing 3 times each on accounts of"
echo "       their own, 30 addresses failing twice each on the account 'victim', 50 normal users with typos"
bin/loginsim -url "http://$LIMITER_ADDR" -token "${API_TOKENS%%,*}" -rate 150 || true

echo
echo "=== 3. Who got banned and why: the messages on $BANS_TOPIC (kept in $bans), by scenario"
settle "$bans"
bin/bansummary "$bans" || true

echo
echo "=== 4. Were they stopped? The login attackers try again after their ban"
bin/loginsim -url "http://$LIMITER_ADDR" -token "${API_TOKENS%%,*}" -after-ban 2 || true

echo
echo "=== 5. What analysts see in Postgres ($demo_db), most first"
echo
settle "$bans"
# The archiver flushes at least every second: wait for the ban rows.
want=$(wc -l <"$bans")
for _ in $(seq 20); do
	[ "$(psql "$DATABASE_URL" -X -q -A -t -c 'SELECT count(*) FROM bans' 2>/dev/null || echo 0)" -ge "$want" ] && break
	sleep 0.5
done
# view TITLE QUERY: prints TITLE and the rows of QUERY (psql ends them with
# an empty line).
view() {
	echo "== $1"
	psql "$DATABASE_URL" -X -q -P pager=off -P footer=off -c "$2" || true
}
view "top_offenders_1h: addresses by violations in the last hour" \
	"SELECT ip_address, violations, distinct_endpoints, distinct_users, to_char(last_seen, 'HH24:MI:SS') AS last_seen
	 FROM top_offenders_1h ORDER BY violations DESC, ip_address LIMIT 5"
view "violations_per_endpoint_hourly: endpoints by violations (rule - : refused by a ban)" \
	"SELECT to_char(hour, 'YYYY-MM-DD HH24:MI') AS hour, endpoint, coalesce(nullif(rule_id, ''), '-') AS rule_id, violations
	 FROM violations_per_endpoint_hourly ORDER BY violations DESC, hour DESC, endpoint LIMIT 5"
view "failures_per_endpoint_hourly: failed logins (reported outcomes) by endpoint and status" \
	"SELECT to_char(hour, 'YYYY-MM-DD HH24:MI') AS hour, endpoint, status, failures, distinct_sources, distinct_users
	 FROM failures_per_endpoint_hourly ORDER BY failures DESC, hour DESC LIMIT 5"
view "failures_per_source_1h: addresses by failures in the last hour, most accounts first among equals" \
	"SELECT ip_address, failures, distinct_users, to_char(last_seen, 'HH24:MI:SS') AS last_seen
	 FROM failures_per_source_1h ORDER BY failures DESC, distinct_users DESC, ip_address LIMIT 5"
view "active_bans: by reason" \
	"SELECT scope, reason, count(*) AS bans, to_char(max(banned_at), 'HH24:MI:SS') AS newest
	 FROM active_bans GROUP BY scope, reason ORDER BY bans DESC, reason"
view "active_bans: newest first" \
	"SELECT scope, subject, reason, count, threshold, to_char(banned_at, 'HH24:MI:SS') AS banned_at,
	        to_char(expires_at, 'HH24:MI:SS') AS expires_at
	 FROM active_bans ORDER BY banned_at DESC, subject LIMIT 5"

echo "demo: the rows stay in $demo_db until the next make demo drops it: psql '$DATABASE_URL'"
