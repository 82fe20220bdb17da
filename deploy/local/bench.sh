#!/usr/bin/env bash
# make bench: the benchmark suite, in one run on one machine and one Redis.
#  1. redis-benchmark EVALSHA of each algorithm's script at -c 50 and at
#     -c 50 -P 16 (the pipelined ceiling): the script the limiter sends for
#     the rules below (one limit, no penalty: lua/<algorithm>_one.lua); for
#     the fixed window, which the limiter counts with INCRBY + PEXPIRE and no
#     script, INCRBY at -P 2 and -P 32, halved (two commands a decision);
#  2. the limiter's POST /v1/check over loopback HTTP (cmd/loadgen, keep-alive,
#     events on) per algorithm, its ratio to (1), and the CPU per decision of
#     the limiter beside Redis's (from /proc); and the same over gRPC (Envoy's
#     ShouldRateLimit, loadgen -protocol grpc, the same limits as RLS config
#     descriptors), and the same checks BATCH at a time (POST /v1/check/batch,
#     loadgen -batch), and over gRPC the post-response pair (a check of
#     hits_addend 0, then a debit, loadgen -debit-after), and with GHZ=1
#     (the default) the same gRPC load from an independent client, ghz
#     (deploy/local/ghz.sh: GHZ_BIN, else installed into .local/bin with
#     go install), in ROUNDS rounds
#     of each, taking turns (HTTP, gRPC, gRPC pairs, batches, ghz) so that the machine's drift hits them alike, each round with a
#     fresh limiter and broker; gRPC ÷ HTTP and batches ÷ HTTP per round;
#     and, with FLOOR=1, the floor: deploy/local/floorserver, the limiter's
#     fasthttp server answering what the limiter answered to every request
#     with no decision behind it, driven as the HTTP rounds are (the most,
#     the HTTP round's maximum rate, its half rate; at the half rate once
#     more with one Redis round trip per request, floorserver -redis): the
#     HTTP server's, the client's and a bare Redis leg's own share;
#  3. p50/p99/p99.9 at a fixed rate of half the maximum measured in (2), per
#     protocol, after HALF_WARMUP at that rate, left out: the first half
#     second after the maximum ran at 4-6 ms p99 in 250 ms slices while
#     what the maximum left queued drained, which is no latency of the rate;
#  4. the in-process decision path (no HTTP) and its ratio to the ceiling;
#  5. limiter peak RSS over 1 M distinct keys, Redis memory per key;
#  6. detector events/s (decisions and outcomes) and ban latencies, archiver
#     rows/s, rule propagation;
#  7. the in-process path against a Redis Cluster of one primary and of
#     three (private redis-server processes, no replicas);
#  8. Redis CPU per decision of each algorithm's full and lean scripts, and
#     for the fixed window of the INCRBY + PEXPIRE pipeline envoyproxy/
#     ratelimit sends, on a private redis-server (go test -tags bench -run
#     TestBenchRedisCPU ./internal/redisstore; CPU_ROUNDS rounds of
#     CPU_DURATION per script, taking turns), and of a concurrency hold's
#     take and release beside a fixed window (TestBenchHoldCPU);
#  9. leased budgets on a hot key (LEASES=1; 0 skips it): one client IP
#     behind every request to three limiters on a private redis-server, a
#     rule of 1e9 a minute per LEASE_ALGORITHMS, unleased and leased taking
#     turns in LEASE_ROUNDS rounds of LEASE_DURATION (go test -tags bench
#     -run TestBenchLeases ./internal/e2e): decisions/s, Redis commands,
#     scripts and round trips per decision, CPU per decision, p50/p99 at
#     half the maximum, leased ÷ unleased per round; after each leased run
#     the floor (as many floorservers as limiters giving the leased answer,
#     the same load at most and at the leased half rate): leased ÷ floor
#     for decisions/s, CPU per request and p99 at the same rate; the heap per key
#     of a leased rule over LEASE_KEYS keys (TestBenchLeaseMemory,
#     ./internal/limiter).
# The table goes to stdout and to $OUT (docs/benchmark.md), which
# docs/performance.md quotes. Needs redis-benchmark and redis-cli (Debian:
# redis-tools), Redis and Postgres as for make test, and a limiter built
# with the gRPC API
# (GRPC_LISTEN_ADDR, RLS_CONFIG_DIR). Knobs: DURATION, CONNS, KEYS,
# ALGORITHMS, ROUNDS, GRPC_CONNS, BATCH, GHZ, GHZ_BIN, FLOOR, RSS_KEYS, CPU_ROUNDS,
# CPU_DURATION, OUT, HALF_WARMUP, LEASES, LEASE_ALGORITHMS, LEASE_ROUNDS,
# LEASE_DURATION, LEASE_CONNS, LEASE_KEYS.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=deploy/local/ghz.sh
source deploy/local/ghz.sh

DURATION=${DURATION:-10s}
HALF_WARMUP=${HALF_WARMUP:-2s}
CONNS=${CONNS:-64}
KEYS=${KEYS:-10000}
ALGORITHMS=${ALGORITHMS:-fixed_window sliding_window sliding_window_counter token_bucket}
ROUNDS=${ROUNDS:-2}
GRPC_CONNS=${GRPC_CONNS:-4}
BATCH=${BATCH:-10}
GHZ=${GHZ:-1}
FLOOR=${FLOOR:-1}
RSS_KEYS=${RSS_KEYS:-1000000}
CPU_ROUNDS=${CPU_ROUNDS:-3}
CPU_DURATION=${CPU_DURATION:-2s}
LEASES=${LEASES:-1}
LEASE_ALGORITHMS=${LEASE_ALGORITHMS:-fixed_window sliding_window_counter token_bucket}
LEASE_ROUNDS=${LEASE_ROUNDS:-3}
LEASE_DURATION=${LEASE_DURATION:-5s}
LEASE_CONNS=${LEASE_CONNS:-48}
LEASE_KEYS=${LEASE_KEYS:-100000}
OUT=${OUT:-docs/benchmark.md}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
LIMITER_ADDR=127.0.0.1:18080
GRPC_ADDR=127.0.0.1:18083
FLOOR_ADDR=127.0.0.1:18090
BROKER_ADDR=127.0.0.1:19092
PREFIX="rwbench:$$:"
work=$(mktemp -d)

[ "$GHZ" != 1 ] || command -v jq >/dev/null || { echo "bench: jq not found, which GHZ=1 needs (Debian: apt-get install jq)" >&2; exit 1; }
for tool in redis-benchmark redis-cli curl; do
	command -v "$tool" >/dev/null || { echo "bench: $tool not found (Debian: apt-get install redis-tools curl)" >&2; exit 1; }
done
rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"; }
rcli ping >/dev/null || { echo "bench: Redis does not answer at $REDIS_HOST:$REDIS_PORT" >&2; exit 1; }

pids=()
limiter_pid=
cleanup() {
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
	clear_keys
	rm -rf "$work"
}
clear_keys() { rcli --scan --pattern "${PREFIX}*" | xargs -r -n 1000 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" del >/dev/null; } # del, not unlink: memory is measured right after
trap cleanup EXIT INT TERM

suffix() { case $1 in fixed_window) echo fw ;; sliding_window) echo sw ;; sliding_window_counter) echo swc ;; token_bucket) echo tb ;; esac; }
# limit_args ALG PER_MS: a limit of 1000 per PER_MS as the script's ARGV.
limit_args() { if [ "$1" = token_bucket ]; then echo "1000 $2 1000"; else echo "1000 $2"; fi; }
# cpu PID: user+system clock ticks the process has used so far.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# per_decision TICKS DECISIONS: CPU µs per decision.
per_decision() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$2" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "n/a" || b == "n/a" || b == 0) printf "n/a"; else printf "%.2f", a / b}'; }
# med FMT: the median of the numbers on stdin, in printf FMT; n/a when one is.
med() { sort -g | awk -v f="$1" '{v[NR] = $1} /n\/a/ {na = 1} END {if (na || !NR) {print "n/a"; exit}; printf f "\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# span FMT: "min – max" of the numbers on stdin in printf FMT, one value when
# they are all equal; n/a when one is.
span() { sort -g | awk -v f="$1" '{v[NR] = $1} /n\/a/ {na = 1} END {if (na || !NR) {print "n/a"; exit}; lo = sprintf(f, v[1]); hi = sprintf(f, v[NR]); print lo == hi ? lo : lo " – " hi}'; }
# rounds ARRAY ALG PROTO: ARRAY's values for ALG over PROTO, one line per round.
rounds() { local -n a=$1; local r; for ((r = 1; r <= ROUNDS; r++)); do echo "${a[$2,$3,$r]}"; done; }
# summed FMT ARRAY ALG PROTO: "median (min – max)" of ARRAY over the rounds.
summed() { local m s; m=$(rounds "$2" "$3" "$4" | med "$1"); s=$(rounds "$2" "$3" "$4" | span "$1"); if [ "$ROUNDS" -gt 1 ] && [ "$s" != "$m" ]; then echo "$m ($s)"; else echo "$m"; fi; }
# quotient A PA B PB ALG: ALG's A over protocol PA ÷ its B over PB, round by
# round (the rounds of one turn against each other), as "min – max".
quotient() { local -n x=$1 y=$3; local r; for ((r = 1; r <= ROUNDS; r++)); do ratio "${x[$5,$2,$r]}" "${y[$5,$4,$r]}"; echo; done | span %.2f; }
# ratios ARRAY ALG PROTO: PROTO ÷ HTTP of ARRAY, round by round.
ratios() { quotient "$1" "$3" "$1" http "$2"; }
# against ARRAY ALG PROTO VALUE: ARRAY ÷ VALUE over the rounds of PROTO, as
# "min – max".
against() { local -n c=$1; local r; for ((r = 1; r <= ROUNDS; r++)); do ratio "${c[$2,$3,$r]}" "$4"; echo; done | span %.2f; }
# rb ARGS...: redis-benchmark's requests/s.
rb() { redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" -q "$@" | tr '\r' '\n' | sed -nE 's/.*: ([0-9.]+) requests per second.*/\1/p' | tail -1; }
redis_pid=$(rcli info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
[ -r "/proc/$redis_pid/stat" ] || redis_pid=

declare -A sha c50 p16 http lim_us redis_us kafka_us pipe half_p50 half_p99 half_p999 half_rps inproc inproc_lim inproc_redis mem_key
# Per round, keyed "algorithm,protocol,round", read by name (rounds, ratios).
# shellcheck disable=SC2034
declare -A r_rps r_lim r_redis r_kafka r_pipe r_hrps r_p50 r_p99 r_p999 r_fmin

# one_limit_script prints the script the limiter sends for a rule of one
# limit, byte for byte (lua.Script(alg, lua.OneLimit, false)): the line that
# sets DEBIT_DENIED, arith.lua's helpers, then the one-limit file.
one_limit_script() {
	echo "local DEBIT_DENIED = false"
	cat lua/arith.lua
	echo
	cat "lua/$1_one.lua"
}
half() { awk -v a="$1" 'BEGIN {printf "%.2f", a / 2}'; }

# 1. The ceiling: redis-benchmark running what the limiter sends for a rule
# of one limit without penalty or escalations: its own script (KEYS state;
# ARGV now, cost, the limit), or for the fixed window INCRBY and PEXPIRE in
# one round trip, which redis-benchmark stands in for with INCRBY pipelined
# by two (PEXPIRE costs Redis about what INCRBY does: TestBenchRedisCPU, 8).
for alg in $ALGORITHMS; do
	key="${PREFIX}{bench|ip=__rand_int__}"
	if [ "$alg" = fixed_window ]; then
		args=(INCRBY "$key:$(suffix "$alg")" 1)
		c50[$alg]=$(half "$(rb -c 50 -P 2 -n 600000 -r "$KEYS" "${args[@]}")")
		p16[$alg]=$(half "$(rb -c 50 -P 32 -n 2000000 -r "$KEYS" "${args[@]}")")
	else
		sha[$alg]=$(one_limit_script "$alg" | rcli -x script load)
		args=(EVALSHA "${sha[$alg]}" 1 "$key:$(suffix "$alg")" 0 1 $(limit_args "$alg" 1000))
		c50[$alg]=$(rb -c 50 -n 300000 -r "$KEYS" "${args[@]}")
		p16[$alg]=$(rb -c 50 -P 16 -n 1000000 -r "$KEYS" "${args[@]}")
	fi
	echo "redis-benchmark $alg: -c 50 ${c50[$alg]}/s, -c 50 -P 16 ${p16[$alg]}/s" >&2
done
clear_keys

# 2 and 3. The limiter over HTTP and over gRPC, one rule per algorithm for
# each, events to a local broker.
{
	echo "rules:"
	for alg in $ALGORITHMS; do
		s=$(suffix "$alg")
		echo "  - {id: bench-$s, match: {endpoints: [\"/$s/**\"]}, key: [ip], algorithm: $alg,"
		if [ "$alg" = token_bucket ]; then echo "     limits: [{rate: 1000, per: 1s, burst: 1000}]}"; else echo "     limits: [{requests: 1000, per: 1s}]}"; fi
	done
	echo "  - {id: bench-rss, match: {endpoints: [\"/rss/**\"]}, key: [ip], algorithm: sliding_window_counter, limits: [{requests: 1, per: 1h}]}"
} >"$work/rules.yaml"
# The same limits for Envoy's rate limit API: one RLS config file, so one
# domain, per algorithm, limiting each remote_address.
mkdir "$work/rls"
for alg in $ALGORITHMS; do
	s=$(suffix "$alg")
	{
		echo "domain: bench_$s"
		echo "descriptors:"
		echo "  - key: remote_address"
		if [ "$alg" = token_bucket ]; then
			echo "    rate_limit: {unit: second, requests_per_unit: 1000, burst: 1000, algorithm: $alg}"
		else
			echo "    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: $alg}"
		fi
	} >"$work/rls/bench_$s.yaml"
done

# The embedded broker keeps every event in memory and slows down as it
# grows, so each run gets a fresh one.
start_broker() {
	LISTEN_ADDR=$BROKER_ADDR bin/devkafka -partitions 3 2>>"$work/devkafka.log" &
	broker_pid=$!
	pids+=($broker_pid)
	for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && return; sleep 0.1; done
	echo "bench: devkafka did not start" >&2
	exit 1
}
# forget PID: a process stopped, so that the clean-up never signals a later
# process given the same id (the limiter and broker restart every round).
forget() {
	local p keep=()
	for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	pids=("${keep[@]}")
}
stop_broker() { kill -TERM "$broker_pid"; wait "$broker_pid" 2>/dev/null || true; forget "$broker_pid"; }
start_limiter() {
	LISTEN_ADDR=$LIMITER_ADDR GRPC_LISTEN_ADDR=$GRPC_ADDR RULES_FILE="$work/rules.yaml" RLS_CONFIG_DIR="$work/rls" \
		REDIS_KEY_PREFIX="$PREFIX" KAFKA_BROKERS=$BROKER_ADDR DYNAMIC_RULES=false \
		REDIS_URL="redis://$REDIS_HOST:$REDIS_PORT/0" LOG_LEVEL=warn INSTANCE_ID=bench bin/limiter 2>>"$work/limiter.log" &
	limiter_pid=$!
	pids+=($limiter_pid)
	local ready=
	for _ in $(seq 100); do curl -fs "http://$LIMITER_ADDR/readyz" >/dev/null && { ready=1; break; }; sleep 0.1; done
	if [ -n "$ready" ]; then
		for _ in $(seq 20); do (exec 3<>"/dev/tcp/${GRPC_ADDR%:*}/${GRPC_ADDR##*:}") 2>/dev/null && return; sleep 0.1; done
		echo "bench: the limiter is ready but does not listen on GRPC_LISTEN_ADDR=$GRPC_ADDR (a build without the gRPC API?):" >&2
	else
		echo "bench: the limiter did not become ready:" >&2
	fi
	cat "$work/limiter.log" >&2
	exit 1
}
stop_limiter() { kill -TERM "$limiter_pid"; wait "$limiter_pid" 2>/dev/null || true; forget "$limiter_pid"; }
metric_sum() { curl -fs "http://$LIMITER_ADDR/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {print s + 0}'; }
run_loadgen() {
	if [ "${1:-}" = -ghz-data ]; then ghz_load ${API_TOKENS:+-token "${API_TOKENS%%,*}"} "$@"; return; fi
	bin/loadgen ${API_TOKENS:+-token "${API_TOKENS%%,*}"} -progress 0 -mix normal=100 -users 0 "$@" >"$work/loadgen.txt" 2>&1 || { cat "$work/loadgen.txt" >&2; exit 1; }
}
loadgen() { run_loadgen -url "http://$LIMITER_ADDR" "$@"; }
# set_target PROTO ALG: loadgen's flags for ALG's rule over PROTO, in tgt.
# Over gRPC the $CONNS concurrent requests share $GRPC_CONNS connections,
# as Envoy multiplexes its calls; batches carry $BATCH checks each.
set_target() {
	local s
	s=$(suffix "$2")
	case $1 in
	grpc) tgt=(-protocol grpc -grpc-addr "$GRPC_ADDR" -grpc-conns "$GRPC_CONNS" -domain "bench_$s") ;;
	grpc_debit) tgt=(-protocol grpc -grpc-addr "$GRPC_ADDR" -grpc-conns "$GRPC_CONNS" -domain "bench_$s" -debit-after 1) ;;
	ghz) tgt=(-ghz-data "$work/ghz_$s.json" -grpc-addr "$GRPC_ADDR" -grpc-conns "$GRPC_CONNS") ;;
	batch) tgt=(-url "http://$LIMITER_ADDR" -endpoint "/$s/books/17" -batch "$BATCH") ;;
	*) tgt=(-url "http://$LIMITER_ADDR" -endpoint "/$s/books/17") ;;
	esac
}
# record_answer ALG: what the limiter answers a check of ALG's rule, as
# `curl -si` prints it, for the floor to give.
record_answer() {
	curl -fsS -i "http://$LIMITER_ADDR/v1/check" ${API_TOKENS:+-H "Authorization: Bearer ${API_TOKENS%%,*}"} \
		-H 'Content-Type: application/json' -d "{\"ip\": \"192.0.2.1\", \"endpoint\": \"/$(suffix "$1")/books/17\"}" >"$work/answer-$1.http"
}
# start_floor ALG ARGS...: the floor giving ALG's recorded answer, with
# ARGS, in floor_pid once it listens.
start_floor() {
	"$work/floorserver" -listen "$FLOOR_ADDR" -answer "$work/answer-$1.http" "${@:2}" 2>>"$work/floor.log" &
	floor_pid=$!
	pids+=($floor_pid)
	for _ in $(seq 100); do (exec 3<>"/dev/tcp/${FLOOR_ADDR%:*}/${FLOOR_ADDR##*:}") 2>/dev/null && return; sleep 0.1; done
	echo "bench: the floor did not start:" >&2
	cat "$work/floor.log" >&2
	exit 1
}
stop_floor() { kill -TERM "$floor_pid"; wait "$floor_pid" 2>/dev/null || true; forget "$floor_pid"; }
# half_run KEY RATE ARGS...: loadgen with ARGS at RATE after HALF_WARMUP,
# left out; its rate, p50, p99 and p99.9 under KEY.
half_run() {
	run_loadgen "${@:3}" -rate "$2" -warmup "$HALF_WARMUP" -duration "$DURATION" -summary-file "$work/half.env"
	(source "$work/half.env"; echo "$rps $p50_ms $p99_ms $p999_ms") >"$work/half.txt"
	read -r "r_hrps[$1]" "r_p50[$1]" "r_p99[$1]" "r_p999[$1]" <"$work/half.txt"
}
# floor_cpu ARGS...: loadgen with ARGS against the floor; its requests/s in
# frps and the floor's CPU per request in fcpu.
floor_cpu() {
	local before after rps n errors
	before=$(cpu "$floor_pid")
	run_loadgen "$@" -summary-file "$work/max.env"
	after=$(cpu "$floor_pid")
	(source "$work/max.env"; echo "$rps $requests $errors") >"$work/max.txt"
	read -r rps n errors <"$work/max.txt"
	[ "$errors" = 0 ] || echo "bench: $errors errors against the floor" >&2
	frps=$rps
	fcpu=$(per_decision $((after - before)) "$n")
}
# floor_round ALG ROUND: the floor driven as the HTTP round ROUND of ALG was:
# the most it serves (its CPU per request there is its least), at that
# round's maximum rate (its CPU per request where the limiter's was taken)
# and at that round's half rate; then, at the half rate again, the floor
# with one INCRBY + PEXPIRE round trip to Redis per request (floorserver
# -redis), the least any answer that waits on Redis costs in latency.
floor_round() {
	local k="$1,floor,$2" half frps fcpu
	local t=(-url "http://$FLOOR_ADDR" -endpoint "/$(suffix "$1")/books/17" -workers "$CONNS" -keys "$KEYS")
	start_floor "$1"
	run_loadgen "${t[@]}" -duration 3s # warm-up
	floor_cpu "${t[@]}" -duration "$DURATION"
	r_rps[$k]=$frps
	r_fmin[$k]=$fcpu
	floor_cpu "${t[@]}" -rate "${r_rps[$1,http,$2]%.*}" -duration "$DURATION"
	r_lim[$k]=$fcpu
	half=$(awk -v r="${r_rps[$1,http,$2]}" 'BEGIN {printf "%d", r / 2}')
	half_run "$k" "$half" "${t[@]}"
	stop_floor
	start_floor "$1" -redis "$REDIS_HOST:$REDIS_PORT" -prefix "${PREFIX}floor:" -keys "$KEYS" -redis-conns "$CONNS"
	half_run "$1,floor_redis,$2" "$half" "${t[@]}"
	stop_floor
	echo "floor $1 round $2: ${r_rps[$k]}/s, CPU/request ${r_fmin[$k]} µs, ${r_lim[$k]} µs at the limiter's ${r_rps[$1,http,$2]}/s; at ${r_hrps[$k]}/s p99 ${r_p99[$k]} ms, with a Redis round trip ${r_p99[$1,floor_redis,$2]} ms" >&2
}
[ "$FLOOR" != 1 ] || go build -o "$work/floorserver" ./deploy/local/floorserver
protocols="http grpc grpc_debit"
[ "$BATCH" -le 1 ] || protocols="$protocols batch"
if [ "$GHZ" = 1 ]; then
	protocols="$protocols ghz"
	ghz_setup "$work"
	for alg in $ALGORITHMS; do ghz_data "bench_$(suffix "$alg")" "$KEYS" "$work/ghz_$(suffix "$alg").json"; done
fi
# proto_name PROTO: how the tables name PROTO.
proto_name() { case $1 in http) echo HTTP ;; grpc) echo gRPC ;; grpc_debit) echo "gRPC check + debit" ;; ghz) echo "gRPC (ghz)" ;; batch) echo "HTTP batches of $BATCH" ;; esac; }

published=0
dropped=0
# shellcheck disable=SC2034 # the r_ arrays are read by name
for alg in $ALGORITHMS; do
	for ((r = 1; r <= ROUNDS; r++)); do
		for proto in $protocols; do
			k="$alg,$proto,$r"
			set_target "$proto" "$alg"
			start_broker
			start_limiter
			run_loadgen "${tgt[@]}" -workers "$CONNS" -duration 3s -keys "$KEYS" # warm-up
			calls0=$(metric_sum rate_limit_redis_pipeline_calls_sum)
			trips0=$(metric_sum rate_limit_redis_pipeline_calls_count)
			before=($(cpu "$limiter_pid") $(cpu "$broker_pid") ${redis_pid:+$(cpu "$redis_pid")})
			run_loadgen "${tgt[@]}" -workers "$CONNS" -duration "$DURATION" -keys "$KEYS" -summary-file "$work/max.env"
			after=($(cpu "$limiter_pid") $(cpu "$broker_pid") ${redis_pid:+$(cpu "$redis_pid")})
			calls=$(($(metric_sum rate_limit_redis_pipeline_calls_sum) - calls0))
			trips=$(($(metric_sum rate_limit_redis_pipeline_calls_count) - trips0))
			(source "$work/max.env"; echo "$rps $requests $errors") >"$work/max.txt"
			read -r rps n errors <"$work/max.txt"
			[ "$errors" = 0 ] || echo "bench: $errors errors in the $alg $proto round $r" >&2
			# Every request is under its limit, so each decision is a Redis call:
			# far fewer means the requests matched no rule (over gRPC, an RLS
			# config the limiter did not load), and the figures measure nothing.
			[ $((calls * 10)) -ge $((n * 9)) ] || echo "bench: only $calls Redis calls for $n decisions in the $alg $proto round $r: do the requests match the rule?" >&2
			r_rps[$k]=$rps
			r_lim[$k]=$(per_decision $((after[0] - before[0])) "$n")
			r_kafka[$k]=$(per_decision $((after[1] - before[1])) "$n")
			r_redis[$k]=n/a
			[ -z "$redis_pid" ] || r_redis[$k]=$(per_decision $((after[2] - before[2])) "$n")
			r_pipe[$k]=$(awk -v c="$calls" -v t="$trips" 'BEGIN {printf "%.1f", c / t}')

			half=$(awk -v r="$rps" 'BEGIN {printf "%d", r / 2}')
			half_run "$k" "$half" "${tgt[@]}" -workers "$CONNS" -keys "$KEYS"
			echo "limiter $alg $proto round $r: ${r_rps[$k]}/s, CPU/decision limiter ${r_lim[$k]} µs redis ${r_redis[$k]} µs; at ${r_hrps[$k]}/s p99 ${r_p99[$k]} ms" >&2
			[ "$proto" != http ] || [ "$FLOOR" != 1 ] || record_answer "$alg"
			published=$((published + $(metric_sum rate_limit_events_published_total)))
			dropped=$((dropped + $(metric_sum rate_limit_events_dropped_total)))
			stop_limiter
			stop_broker
		done
		[ "$FLOOR" != 1 ] || floor_round "$alg" "$r"
	done
	# The HTTP table: the median of the HTTP rounds.
	http[$alg]=$(rounds r_rps "$alg" http | med %.1f)
	lim_us[$alg]=$(rounds r_lim "$alg" http | med %.1f)
	kafka_us[$alg]=$(rounds r_kafka "$alg" http | med %.1f)
	redis_us[$alg]=$(rounds r_redis "$alg" http | med %.1f)
	pipe[$alg]=$(rounds r_pipe "$alg" http | med %.1f)
	half_rps[$alg]=$(rounds r_hrps "$alg" http | med %.1f)
	half_p50[$alg]=$(rounds r_p50 "$alg" http | med %.3f)
	half_p99[$alg]=$(rounds r_p99 "$alg" http | med %.3f)
	half_p999[$alg]=$(rounds r_p999 "$alg" http | med %.3f)
done

# 5a. Limiter peak RSS: a fresh limiter, 1 M distinct client IPs in order,
# then half of them again (each denied, so the over-limit cache fills up to
# its bound).
start_broker
start_limiter
loadgen -workers "$CONNS" -duration 0 -requests $((RSS_KEYS * 3 / 2)) -keys "$RSS_KEYS" -key-order sequential -endpoint /rss/books/17 -summary-file "$work/rss.env"
(source "$work/rss.env"; echo "$rps $requests $denied") >"$work/rss.txt"
read -r rss_rps rss_requests rss_denied <"$work/rss.txt"
rss_mb=$(awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$limiter_pid/status")
rss_cache=$(metric_sum rate_limit_over_limit_cache_entries)
stop_limiter
stop_broker
clear_keys

# 5b. Redis memory per key: 50 000 keys, about 10 requests each inside the
# window (a limit of 1000 per minute), named as the limiter names them (the
# fixed window's: a counter per window, <state>:<per ms>:<window index>);
# MEMORY USAGE (key, value and overhead) averaged over 1000 of them.
for alg in $ALGORITHMS; do
	key="${PREFIX}{bench|ip=__rand_int__}"
	if [ "$alg" = fixed_window ]; then
		rb -c 50 -P 16 -n 500000 -r 50000 INCRBY "$key:$(suffix "$alg"):60000:29616640" 1 >/dev/null
	else
		rb -c 50 -P 16 -n 500000 -r 50000 EVALSHA "${sha[$alg]}" 1 "$key:$(suffix "$alg")" 0 1 $(limit_args "$alg" 60000) >/dev/null
	fi
	mem_key[$alg]=$(rcli --scan --pattern "${PREFIX}*" | awk "NR <= 1000" | sed 's/^/MEMORY USAGE /' | rcli | awk '{s += $1; n++} END {printf "%.0f", s / n}')
	clear_keys
done

# 4. The in-process decision path, events to a broker.
start_broker
BENCH_KAFKA_BROKERS=$BROKER_ADDR BENCH_DURATION=$DURATION BENCH_ALGORITHMS="$ALGORITHMS" \
	go test -tags bench -run TestBenchDecisionPath -count=1 -v ./internal/limiter >"$work/inproc.txt" 2>&1 || { cat "$work/inproc.txt" >&2; exit 1; }
for alg in $ALGORITHMS; do
	line=$(grep "^in-process $alg:" "$work/inproc.txt")
	inproc[$alg]=$(sed -E 's/.*: ([0-9]+) decisions.*/\1/' <<<"$line")
	inproc_lim[$alg]=$(sed -E 's/.*limiter ([0-9.]+) µs.*/\1/' <<<"$line")
	inproc_redis[$alg]=$(sed -E 's/.*redis ([0-9.n\/a]+) µs.*/\1/' <<<"$line")
done
stop_broker

# 6. Detector, archiver and rule propagation, with real processes.
go test -tags bench -run 'TestBench(Detector|OutcomeDetector|Archiver|RulePropagation|ClientMiddleware)' -count=1 -v ./internal/e2e >"$work/e2e.txt" 2>&1 || { cat "$work/e2e.txt" >&2; exit 1; }

# The Go client's own costs: a check while its breaker is open, and a check
# against an in-process server that answers at once.
go -C client test -run '^$' -bench 'BenchmarkCheck' -benchtime 20000x -count=1 . >"$work/client.txt" 2>&1 || { cat "$work/client.txt" >&2; exit 1; }

# 7. One primary against three: the in-process path on a Redis Cluster.
start_broker
BENCH_KAFKA_BROKERS=$BROKER_ADDR BENCH_DURATION=$DURATION \
	go test -tags bench -run TestBenchClusterScaling -count=1 -v ./internal/limiter >"$work/cluster.txt" 2>&1 || { cat "$work/cluster.txt" >&2; exit 1; }
stop_broker

# 8. Redis CPU per decision of the scripts, on a private redis-server.
BENCH_ROUNDS=$CPU_ROUNDS BENCH_DURATION=$CPU_DURATION BENCH_ALGORITHMS="$ALGORITHMS" \
	go test -tags bench -run TestBenchRedisCPU -count=1 -v ./internal/redisstore >"$work/rediscpu.txt" 2>&1 || { cat "$work/rediscpu.txt" >&2; exit 1; }
BENCH_ROUNDS=$CPU_ROUNDS BENCH_DURATION=$CPU_DURATION \
	go test -tags bench -run TestBenchHoldCPU -count=1 -v ./internal/redisstore >"$work/holdcpu.txt" 2>&1 || { cat "$work/holdcpu.txt" >&2; exit 1; }

# 9. Leased budgets on a hot key, and the heap per leased key.
if [ "$LEASES" = 1 ]; then
	BENCH_ROUNDS=$LEASE_ROUNDS BENCH_DURATION=$LEASE_DURATION BENCH_HALF_WARMUP=$HALF_WARMUP BENCH_CONNS=$LEASE_CONNS \
		BENCH_ALGORITHMS="$LEASE_ALGORITHMS" go test -tags bench -run TestBenchLeases -count=1 -v -timeout 30m ./internal/e2e \
		>"$work/leases.txt" 2>&1 || { cat "$work/leases.txt" >&2; exit 1; }
	grep -E '^lease ' "$work/leases.txt" >&2
	BENCH_LEASE_KEYS=$LEASE_KEYS go test -tags bench -run TestBenchLeaseMemory -count=1 -v ./internal/limiter \
		>"$work/leasemem.txt" 2>&1 || { cat "$work/leasemem.txt" >&2; exit 1; }
fi

# Whether the tree differs from the commit, but for $OUT, which tee empties
# before the line naming the commit is written.
dirty=$(git diff --quiet -- . ":(exclude)$OUT" || echo ' (with local changes)')
{
	echo "# Benchmark"
	echo
	echo "\`make bench\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)$dirty:"
	echo "$(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr), $(go version | awk '{print $3}'), $(redis-server --version | awk '{print $1, $3}')."
	echo "Load generator, limiter, broker and Redis share these cores. Load runs: $DURATION each, $CONNS keep-alive connections, $KEYS client IPs, one rule (limit 1000/s per IP) per algorithm, events on; HTTP figures are the median of $ROUNDS rounds, each with a fresh limiter and broker."
	echo
	echo "| algorithm | redis-benchmark -c 50 | -c 50 -P 16 | limiter HTTP | HTTP / -c 50 | CPU µs/decision limiter | Redis | broker | calls per round trip | in-process | in-process / -P 16 | in-process CPU µs limiter / Redis |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for alg in $ALGORITHMS; do
		echo "| $alg | ${c50[$alg]}/s | ${p16[$alg]}/s | ${http[$alg]}/s | $(ratio "${http[$alg]}" "${c50[$alg]}") | ${lim_us[$alg]} | ${redis_us[$alg]} | ${kafka_us[$alg]} | ${pipe[$alg]} | ${inproc[$alg]}/s | $(ratio "${inproc[$alg]}" "${p16[$alg]}") | ${inproc_lim[$alg]} / ${inproc_redis[$alg]} |"
	done
	echo
	echo "Latency at a fixed rate of half the maximum (cmd/loadgen, open loop, measured from each request's scheduled time, after $HALF_WARMUP at that rate left out; HTTP, median of $ROUNDS rounds):"
	echo
	echo "| algorithm | rate | p50 | p99 | p99.9 |"
	echo "|---|---|---|---|---|"
	for alg in $ALGORITHMS; do
		echo "| $alg | ${half_rps[$alg]}/s | ${half_p50[$alg]} ms | ${half_p99[$alg]} ms | ${half_p999[$alg]} ms |"
	done
	echo
	echo "HTTP against gRPC (Envoy's ShouldRateLimit, \`loadgen -protocol grpc\`: the same $CONNS concurrent requests over $GRPC_CONNS HTTP/2 connections, one remote_address descriptor in an RLS config domain per algorithm with the same limit; gRPC check + debit: Envoy AI Gateway's pair per request, \`loadgen -debit-after 1\`, a check of hits_addend 0 then a debit of 1 when admitted, the figures per request, so two calls each)$([ "$BATCH" -le 1 ] || echo " and against batches (POST /v1/check/batch, \`loadgen -batch $BATCH\`: $BATCH checks per request on each of the $CONNS connections; a check's latency is its batch's)")$([ "$GHZ" != 1 ] || echo "; gRPC (ghz): the gRPC load from an independent client, ghz $(go version -m "$ghz" | awk '$1 == "mod" {print $3}') (\`-c $CONNS --connections $GRPC_CONNS\`, the remote_address taking $KEYS values in turn; at half the maximum \`--rps\`, latency from each call's start, no p99.9)"). $ROUNDS rounds of each, taking turns, each with a fresh limiter and broker: median (min – max) over the rounds. The ÷ HTTP rows divide each round by the HTTP round of the same turn: min – max of those ratios."
	echo
	echo "| algorithm | protocol | decisions/s | CPU µs/decision limiter | Redis | broker | calls per round trip | at half the maximum: rate | p50 ms | p99 ms |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for alg in $ALGORITHMS; do
		for proto in $protocols; do
			echo "| $alg | $(proto_name "$proto") | $(summed %.1f r_rps "$alg" $proto) | $(summed %.1f r_lim "$alg" $proto) | $(summed %.1f r_redis "$alg" $proto) | $(summed %.1f r_kafka "$alg" $proto) | $(summed %.1f r_pipe "$alg" $proto) | $(summed %.1f r_hrps "$alg" $proto) | $(summed %.3f r_p50 "$alg" $proto) | $(summed %.3f r_p99 "$alg" $proto) |"
		done
		for proto in $protocols; do
			[ "$proto" != http ] || continue
			echo "| $alg | $(proto_name "$proto") ÷ HTTP | $(ratios r_rps "$alg" $proto) | $(ratios r_lim "$alg" $proto) | $(ratios r_redis "$alg" $proto) | $(ratios r_kafka "$alg" $proto) | $(ratios r_pipe "$alg" $proto) | $(ratios r_hrps "$alg" $proto) | $(ratios r_p50 "$alg" $proto) | $(ratios r_p99 "$alg" $proto) |"
		done
	done
	echo
	echo "The limiter's CPU per decision against the in-process path's (section 4, the same coalescer, Redis and events without HTTP) and against Redis's, per round (min – max):"
	echo
	echo "| algorithm | protocol | limiter ÷ in-process | limiter ÷ Redis |"
	echo "|---|---|---|---|"
	for alg in $ALGORITHMS; do
		for proto in $protocols; do
			echo "| $alg | $(proto_name "$proto") | $(against r_lim "$alg" $proto "${inproc_lim[$alg]}") | $(quotient r_lim $proto r_redis $proto "$alg") |"
		done
	done
	if [ "$FLOOR" = 1 ]; then
		echo
		echo "The floor (deploy/local/floorserver: the limiter's fasthttp server giving the limiter's own answer to every request, with no decision, Redis or event behind it), driven as the HTTP rounds: at most; at the HTTP round's maximum rate, where its CPU per request is set beside the limiter's; at the HTTP round's half rate, bare and with one INCRBY + PEXPIRE round trip to Redis per request (\`floorserver -redis\`: no coalescing, no decision, no event). What the HTTP server, the client and a Redis leg cost by themselves on this machine: median (min – max) over the rounds, ratios per round:"
		echo
		echo "| algorithm | floor requests/s | ÷ redis-benchmark -c 50 | floor CPU µs/request at its maximum | at the limiter's | ÷ in-process | ÷ Redis (HTTP) | limiter HTTP ÷ floor, CPU | p99 at the HTTP half rate: floor | with a Redis round trip | limiter HTTP |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|"
		for alg in $ALGORITHMS; do
			echo "| $alg | $(summed %.1f r_rps "$alg" floor) | $(against r_rps "$alg" floor "${c50[$alg]}") | $(summed %.1f r_fmin "$alg" floor) | $(summed %.1f r_lim "$alg" floor) | $(against r_lim "$alg" floor "${inproc_lim[$alg]}") | $(quotient r_lim floor r_redis http "$alg") | $(quotient r_lim http r_lim floor "$alg") | $(summed %.3f r_p99 "$alg" floor) ms | $(summed %.3f r_p99 "$alg" floor_redis) ms | $(summed %.3f r_p99 "$alg" http) ms |"
		done
	fi
	echo
	echo "Memory:"
	echo
	echo "| measure | value |"
	echo "|---|---|"
	echo "| limiter peak RSS (VmHWM), $RSS_KEYS distinct client IPs then half again ($rss_requests requests at ${rss_rps}/s, $rss_denied denied) | $rss_mb MB (over-limit cache: $rss_cache entries) |"
	for alg in $ALGORITHMS; do
		echo "| Redis memory per key (MEMORY USAGE), $alg, ~10 requests in the window | ${mem_key[$alg]} bytes |"
	done
	echo
	echo "Events during the load runs (every protocol): $published published, $dropped dropped."
	echo
	echo "Pipeline (go test -tags bench ./internal/e2e):"
	echo
	grep -E '^(detector:|outcome detector|ban latency|archiver:|rule propagation|client middleware)' "$work/e2e.txt" | sed 's/^/- /'
	echo
	echo "Go client (cd client && go test -bench BenchmarkCheck .; allocations per request of the middleware: TestAllocations):"
	echo
	grep -E '^BenchmarkCheck' "$work/client.txt" | sed 's/^/- /'
	echo
	echo "Redis Cluster, one primary against three (go test -tags bench -run TestBenchClusterScaling ./internal/limiter; no replicas, events on):"
	echo
	grep -E '^cluster [0-9]+ primaries' "$work/cluster.txt" | sed 's/^/- /'
	echo
	echo "Redis CPU per decision, full and lean scripts; fixed window: lean / full / INCRBY+PEXPIRE reference, ratios (go test -tags bench -run TestBenchRedisCPU ./internal/redisstore: a private redis-server, its utime + stime ÷ decisions; $(sed -nE 's/^redis-cpu setup: //p' "$work/rediscpu.txt"), scripts taking turns within each round; median (min – max) over the rounds, ratios per round):"
	echo
	grep -E '^\|' "$work/rediscpu.txt"
	echo
	echo "Redis CPU of a concurrency limit's hold, a take and its release, beside a one-limit fixed window (go test -tags bench -run TestBenchHoldCPU ./internal/redisstore: $(sed -nE 's/^hold-cpu setup: //p' "$work/holdcpu.txt"); loads taking turns within each round; median (min – max) over the rounds, ratios per round):"
	echo
	grep -E '^\|' "$work/holdcpu.txt"
	if [ "$LEASES" = 1 ]; then
		echo
		echo "Leased budgets on a hot key (go test -tags bench -run TestBenchLeases ./internal/e2e: $(sed -nE 's/^lease setup: //p' "$work/leases.txt"); cmd/loadgen over the limiters in turn, one rule of 1e9 requests a minute per algorithm (token bucket: 1e7 a second), events to an embedded broker; the rule unleased and leased (\`lease: true\`) taking turns in each round, each run on fresh limiters; Redis commands per decision: INFO total_commands_processed, which counts the commands scripts run, less INFO; scripts: EVAL and EVALSHA; round trips: the limiters' own; at half the maximum after a warm-up run of $HALF_WARMUP at that rate; the floor: as many deploy/local/floorserver processes as limiters giving the leased limiters' own answer to every request, with no decision, Redis or event behind it, driven by the same load generator at most and at the leased half rate. Median (min – max) over the rounds; ratios per round, min – max):"
		echo
		awk '/^\|/ {if (gap && seen) print ""; print; seen = 1; gap = 0; next} {gap = 1}' "$work/leases.txt"
		echo
		echo "Heap per key of a leased rule (go test -tags bench -run TestBenchLeaseMemory ./internal/limiter; runtime.MemStats.HeapAlloc after a GC; a limiter tracks at most LEASE_MAX_KEYS keys):"
		echo
		grep -E '^lease memory:' "$work/leasemem.txt" | sed 's/^lease memory: /- /'
	fi
} | tee "$OUT"
echo
echo "bench: table written to $OUT"
