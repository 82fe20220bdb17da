#!/usr/bin/env bash
# make bench: POST /v1/check throughput and latency over loopback HTTP
# (keep-alive, 64 connections, random client IPs over 10k keys, one
# sliding-window rule, events on) next to redis-benchmark's EVALSHA rate of the
# same script at -c 50, measured in the same run on the same Redis.
# Needs redis-benchmark and wrk (Debian: apt-get install redis-tools wrk).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-15s}
CONNS=${CONNS:-64}
KEYS=${KEYS:-10000}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
LIMITER_ADDR=127.0.0.1:18080
BROKER_ADDR=127.0.0.1:19092
PREFIX="rwbench:$$:"
work=$(mktemp -d)

for tool in wrk redis-benchmark redis-cli; do
	command -v "$tool" >/dev/null || { echo "bench: $tool not found (Debian: apt-get install wrk redis-tools)" >&2; exit 1; }
done

pids=()
cleanup() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
	redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --scan --pattern "${PREFIX}*" | xargs -r -n 500 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" del >/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

cat >"$work/rules.yaml" <<'RULES'
rules:
  - id: bench
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 1000, per: 1s}]
RULES

# 1. The ceiling: redis-benchmark running the limiter's own script.
sha=$(cat lua/prelude.lua lua/sliding_window.lua | redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" -x script load)
key="${PREFIX}{bench|ip=__rand_int__}"
redis_rps=$(redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -c 50 -n 300000 -r "$KEYS" -q \
	EVALSHA "$sha" 3 "$key:sw" "$key:hold" "$key:hits" 0 1 0 0 1 1000 1000 |
	tr '\r' '\n' | sed -nE 's/.*: ([0-9.]+) requests per second.*/\1/p' | tail -1)

# 2. The limiter over HTTP, with a local broker taking its events.
LISTEN_ADDR=$BROKER_ADDR bin/devkafka -partitions 3 2>"$work/devkafka.log" &
pids+=($!)
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
LISTEN_ADDR=$LIMITER_ADDR RULES_FILE="$work/rules.yaml" REDIS_KEY_PREFIX="$PREFIX" KAFKA_BROKERS=$BROKER_ADDR \
	REDIS_URL="redis://$REDIS_HOST:$REDIS_PORT/0" LOG_LEVEL=warn REDIS_PIPELINES=${REDIS_PIPELINES:-4} INSTANCE_ID=bench bin/limiter 2>"$work/limiter.log" &
limiter_pid=$!
pids+=($limiter_pid)
for _ in $(seq 100); do curl -fs "http://$LIMITER_ADDR/readyz" >/dev/null && break; sleep 0.1; done

cat >"$work/check.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local n = math.random(0, $KEYS - 1)
  local ip = "10." .. math.floor(n / 65536) .. "." .. (math.floor(n / 256) % 256) .. "." .. (n % 256)
  return wrk.format(nil, "/v1/check", nil, '{"ip":"' .. ip .. '","endpoint":"/api/books/17"}')
end
LUA
wrk -t2 -c16 -d3s -s "$work/check.lua" "http://$LIMITER_ADDR" >/dev/null # warm-up
# cpu PID: user+system clock ticks the process has used so far.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_pid=$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
[ -r "/proc/$redis_pid/stat" ] || redis_pid=
before=($(cpu "$limiter_pid") $(cpu "${pids[0]}") ${redis_pid:+$(cpu "$redis_pid")})
wrk -t"${WRK_THREADS:-2}" -c"$CONNS" -d"$DURATION" --latency -s "$work/check.lua" "http://$LIMITER_ADDR" >"$work/wrk.txt"
after=($(cpu "$limiter_pid") $(cpu "${pids[0]}") ${redis_pid:+$(cpu "$redis_pid")})

http_rps=$(awk '/^Requests\/sec/ {print $2}' "$work/wrk.txt")
total=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
errors=$(grep -E 'Non-2xx|Socket errors' "$work/wrk.txt" || true)
# per_decision I: CPU µs per decision of the i-th process sampled above.
per_decision() { awk -v t=$((after[$1] - before[$1])) -v hz="$(getconf CLK_TCK)" -v n="$total" 'BEGIN {printf "%.1f µs", t / hz * 1e6 / n}'; }
metrics=$(curl -fs "http://$LIMITER_ADDR/metrics")
dropped=$(awk '/^rate_limit_events_dropped_total/ {s += $2} END {print s + 0}' <<<"$metrics")
published=$(awk '/^rate_limit_events_published_total/ {s += $2} END {print s + 0}' <<<"$metrics")
pipeline_avg=$(awk '/^rate_limit_redis_pipeline_calls_sum/ {s = $2} /^rate_limit_redis_pipeline_calls_count/ {c = $2} END {if (c) printf "%.1f", s / c}' <<<"$metrics")
redis_errors=$(awk '/^rate_limit_redis_errors_total/ {s += $2} END {print s + 0}' <<<"$metrics")

echo
echo "== make bench: POST /v1/check, one sliding-window rule, $KEYS keys, $CONNS connections, $DURATION, events on"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); $(redis-server --version | awk '{print $1, $3}')"
printf '%-44s %12s\n' "redis-benchmark EVALSHA sliding_window -c 50" "$redis_rps/s"
printf '%-44s %12s\n' "limiter POST /v1/check (wrk -c $CONNS)" "$http_rps/s"
printf '%-44s %12s\n' "ratio limiter / redis-benchmark" "$(awk -v a="$http_rps" -v b="$redis_rps" 'BEGIN {printf "%.2f", a / b}')"
printf '%-44s %12s\n' "latency p50 / p99" "$p50 / $p99"
printf '%-44s %12s\n' "CPU per decision: limiter" "$(per_decision 0)"
[ -z "$redis_pid" ] || printf '%-44s %12s\n' "CPU per decision: redis-server" "$(per_decision 2)"
printf '%-44s %12s\n' "CPU per decision: devkafka (event broker)" "$(per_decision 1)"
printf '%-44s %12s\n' "events published / dropped" "$published / $dropped"
printf '%-44s %12s\n' "decisions per Redis round trip (mean)" "$pipeline_avg"
printf '%-44s %12s\n' "redis errors during the run" "$redis_errors"
[ -z "$errors" ] || echo "wrk: $errors"

# 3. Detector throughput on a backlog and ban latency (scan threshold crossed
# -> the limiter denies), with real processes.
echo
echo "== detector, archiver, rule propagation (go test -tags bench -run 'TestBench(Detector|Archiver|RulePropagation)' ./internal/e2e)"
go test -tags bench -run 'TestBench(Detector|Archiver|RulePropagation)' -count=1 -v ./internal/e2e 2>&1 |
	grep -E '^(detector:|ban latency|archiver:|rule propagation)|FAIL' || true
