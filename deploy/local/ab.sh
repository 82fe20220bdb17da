#!/usr/bin/env bash
# deploy/local/ab.sh A B: two limiter builds side by side under make bench's
# HTTP load (section 2 and 3 of deploy/local/bench.sh), or with PROTOCOL=grpc
# its gRPC load (Envoy's ShouldRateLimit, one remote_address descriptor of
# an RLS config domain with the same limit, GRPC_CONNS connections), or
# with PROTOCOL=json the same request to envoyproxy/ratelimit's POST /json
# over CONNS keep-alive HTTP/1.1 connections, or with PROTOCOL=batch the
# HTTP checks BATCH (10) per POST /v1/check/batch, or with PROTOCOL=ghz
# the gRPC load driven by an independent client, ghz (github.com/bojand/ghz:
# -c CONNS --connections GRPC_CONNS, the same one remote_address descriptor,
# its value taking KEYS client IPs in turn), in
# ROUNDS rounds that alternate A and B, so that this machine's drift hits
# both alike.
# Each round: a fresh broker and limiter, a 3 s warm-up, DURATION at
# CONNS keep-alive connections (throughput, CPU per decision of the limiter
# and of Redis, and the limiter's system calls per decision, from /proc),
# then DURATION at half that rate (p50, p99)
# after HALF_WARMUP at it, left out (as in make bench: what the maximum
# left queued drains in it).
# B ÷ A per pair of rounds closes the table. A and B are limiter binaries
# (say, one built from main with `go build -o /tmp/a ./cmd/limiter`);
# bin/loadgen and bin/devkafka come from this tree (make build).
# The limit is LIMIT requests per UNIT (1000 per second; UNIT second,
# minute or hour) per client IP; LEASE=1 leases it (`lease: true` in the
# rules file and the RLS config), LEASE=A or LEASE=B for that build only,
# so that one binary given twice measures the rule unleased against leased
# (KEYS=1 makes the one client a hot key, which is what leases are for).
# ghz is GHZ_BIN, else .local/bin/ghz, installed there with go install
# when missing (deploy/local/ghz.sh: how it is driven and what it measures).
# FLOOR=1 (http only) adds, after each build's run, the floor
# (deploy/local/floorserver: the limiter's fasthttp server giving, to every
# request, the answer that build gave the load's first request, the same
# status, headers and body, with no decision behind it), driven by the same
# load generator: at most (its requests/s and CPU per request, beside the
# build's at its maximum), then at the build's half rate, where the two
# are set side by side at the same rate: CPU per request of each, the
# limiter's ÷ the floor's, and p99 ÷ the floor's. With LEASE=1 KEYS=1 that is how close
# a leased decision comes to the bare HTTP exchange.
# Knobs: ALGORITHM, DURATION, CONNS, KEYS, ROUNDS, PROTOCOL, GRPC_CONNS,
# BATCH, HALF_WARMUP, LIMIT, UNIT, LEASE, FLOOR, GHZ_BIN, GHZ_VERSION, GHZ_TEMPLATE.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=deploy/local/ghz.sh
source deploy/local/ghz.sh
[ $# -eq 2 ] || { echo "usage: $0 LIMITER_A LIMITER_B" >&2; exit 2; }
bins=("$1" "$2")
ALGORITHM=${ALGORITHM:-fixed_window}
DURATION=${DURATION:-10s}
HALF_WARMUP=${HALF_WARMUP:-2s}
CONNS=${CONNS:-64}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-3}
PROTOCOL=${PROTOCOL:-http}
GRPC_CONNS=${GRPC_CONNS:-4}
BATCH=${BATCH:-10}
LIMIT=${LIMIT:-1000}
UNIT=${UNIT:-second}
LEASE=${LEASE:-}
FLOOR=${FLOOR:-}
FLOOR_ADDR=127.0.0.1:18090
GRPC_ADDR=127.0.0.1:18083
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
LIMITER_ADDR=127.0.0.1:18080
BROKER_ADDR=127.0.0.1:19092
PREFIX="rwab:$$:"
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" --scan --pattern "${PREFIX}*" | xargs -r -n 1000 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" unlink >/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# syscalls PID: the read and write system calls PID has made (syscr +
# syscw): a count, steadier on a shared machine than CPU time, of what
# batching saves (the sockets' reads and writes are most of them).
syscalls() { awk '/^sysc[rw]:/ {s += $2} END {print s}' "/proc/$1/io"; }
per_decision() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$2" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}'; }
redis_pid=$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
case $UNIT in second) per=1s ;; minute) per=1m ;; hour) per=1h ;; *) echo "UNIT=$UNIT: want second, minute or hour" >&2; exit 2 ;; esac
# Each build's lease setting, as written in the rules file and RLS config:
# nothing when unleased, for builds older than the setting.
on=", lease: true"
case $LEASE in "" | 0) leased=("" "") ;; 1) leased=("$on" "$on") ;; A) leased=("$on" "") ;; B) leased=("" "$on") ;;
*) echo "LEASE=$LEASE: want 1, A or B" >&2; exit 2 ;; esac
if [ "$ALGORITHM" = token_bucket ]; then limit="{rate: $LIMIT, per: $per, burst: $LIMIT}"; else limit="{requests: $LIMIT, per: $per}"; fi
if [ "$ALGORITHM" = token_bucket ]; then burst=", burst: $LIMIT"; else burst=; fi
# Build v's rules file and RLS config directory: $work/rules_v.yaml, $work/rls_v.
for v in 0 1; do
	echo "rules: [{id: ab, match: {endpoints: [\"/ab/**\"]}, key: [ip], algorithm: $ALGORITHM, limits: [$limit]${leased[v]}}]" >"$work/rules_$v.yaml"
	mkdir "$work/rls_$v"
	printf 'domain: ab\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: %s, requests_per_unit: %s%s, algorithm: %s%s}\n' \
		"$UNIT" "$LIMIT" "$burst" "$ALGORITHM" "${leased[v]}" >"$work/rls_$v/ab.yaml"
done
case $PROTOCOL in
http) target=(-url "http://$LIMITER_ADDR" -endpoint /ab/books/17) ;;
batch) target=(-url "http://$LIMITER_ADDR" -endpoint /ab/books/17 -batch "$BATCH") ;;
json) target=(-protocol json -url "http://$LIMITER_ADDR" -domain ab) ;;
grpc) target=(-protocol grpc -grpc-addr "$GRPC_ADDR" -grpc-conns "$GRPC_CONNS" -domain ab) ;;
ghz) ghz_setup "$work" && ghz_data ab "$KEYS" "$work/ghz.json"
	target=(-ghz-data "$work/ghz.json" -grpc-addr "$GRPC_ADDR" -grpc-conns "$GRPC_CONNS") ;;
*) echo "PROTOCOL=$PROTOCOL: want http, batch, json, grpc or ghz" >&2; exit 2 ;;
esac
case $FLOOR in "" | 0) FLOOR= ;; 1) [ "$PROTOCOL" = http ] || { echo "FLOOR=1: PROTOCOL=http only" >&2; exit 2; } ;;
*) echo "FLOOR=$FLOOR: want 1" >&2; exit 2 ;; esac
[ -z "$FLOOR" ] || go build -o "$work/floorserver" ./deploy/local/floorserver
run_loadgen() {
	if [ "$PROTOCOL" = ghz ]; then ghz_load "${target[@]}" -workers "$CONNS" "$@"; return; fi
	bin/loadgen -progress 0 -mix normal=100 -users 0 "${target[@]}" \
		-workers "$CONNS" -keys "$KEYS" "$@" >"$work/loadgen.txt" 2>&1 || { cat "$work/loadgen.txt" >&2; exit 1; }
}

declare -A tput lim red sys p50 p99 hlim ftput flim fhlim fp99
# half_cpu PID: loadgen at half the maximum x, the CPU per request of PID
# over it in hcpu, p50 and p99 in hp50 and hp99.
half_cpu() {
	local before after n
	run_loadgen -rate "$(awk -v r="$x" 'BEGIN {printf "%d", r / 2}')" -warmup "$HALF_WARMUP" -duration 1s
	before=$(cpu "$1")
	run_loadgen -rate "$(awk -v r="$x" 'BEGIN {printf "%d", r / 2}')" -duration "$DURATION" -summary-file "$work/half.env"
	after=$(cpu "$1")
	read -r n hp50 hp99 < <(source "$work/half.env"; echo "$requests $p50_ms $p99_ms")
	hcpu=$(per_decision $((after - before)) "$n")
}
# floor_run V ROUND: the floor giving build V's recorded answer: at most
# (closed loop, as the build was), then at half the build's maximum x.
floor_run() {
	local k=$1,$2 before after n
	"$work/floorserver" -listen "$FLOOR_ADDR" -answer "$work/answer.http" 2>>"$work/floor.log" &
	floor=$!
	pids=("$floor" "${pids[@]}")
	for _ in $(seq 100); do (exec 3<>"/dev/tcp/${FLOOR_ADDR%:*}/${FLOOR_ADDR##*:}") 2>/dev/null && break; sleep 0.1; done
	target=(-url "http://$FLOOR_ADDR" -endpoint /ab/books/17)
	run_loadgen -duration 3s
	before=$(cpu "$floor")
	run_loadgen -duration "$DURATION" -summary-file "$work/max.env"
	after=$(cpu "$floor")
	read -r "ftput[$k]" n < <(source "$work/max.env"; echo "$rps $requests")
	flim[$k]=$(per_decision $((after - before)) "$n")
	half_cpu "$floor"
	fhlim[$k]=$hcpu
	fp99[$k]=$hp99
	target=(-url "http://$LIMITER_ADDR" -endpoint /ab/books/17)
	kill -TERM "$floor"
	wait "$floor" 2>/dev/null || true
	pids=("${pids[@]:1}")
}
if [ -z "$FLOOR" ]; then
	printf '| round | build | decisions/s | CPU µs/decision limiter | Redis | syscalls/decision limiter | at half: p50 ms | p99 ms |\n|---|---|---|---|---|---|---|---|\n'
else
	printf '| round | build | decisions/s | floor | ÷ floor | CPU µs/decision limiter | floor | ÷ floor | Redis | at half: CPU µs limiter | floor | ÷ floor | p50 ms | p99 ms | floor p99 ms | ÷ floor |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
fi
for ((r = 1; r <= ROUNDS; r++)); do
	for v in 0 1; do
		LISTEN_ADDR=$BROKER_ADDR bin/devkafka -partitions 3 2>>"$work/devkafka.log" &
		broker=$!
		pids=("$broker")
		for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
		LISTEN_ADDR=$LIMITER_ADDR GRPC_LISTEN_ADDR=$GRPC_ADDR RLS_CONFIG_DIR="$work/rls_$v" RULES_FILE="$work/rules_$v.yaml" REDIS_KEY_PREFIX="$PREFIX$v:" \
			KAFKA_BROKERS=$BROKER_ADDR DYNAMIC_RULES=false REDIS_URL="redis://$REDIS_HOST:$REDIS_PORT/0" LOG_LEVEL=warn \
			INSTANCE_ID=ab "${bins[v]}" 2>>"$work/limiter.log" &
		limiter=$!
		pids=("$limiter" "$broker")
		# /healthcheck: envoyproxy/ratelimit's, when it is one of the two
		for _ in $(seq 100); do curl -fs "http://$LIMITER_ADDR/readyz" >/dev/null || curl -fs "http://$LIMITER_ADDR/healthcheck" >/dev/null && break; sleep 0.1; done
		for _ in $(seq 20); do (exec 3<>"/dev/tcp/${GRPC_ADDR%:*}/${GRPC_ADDR##*:}") 2>/dev/null && break; sleep 0.1; done
		run_loadgen -duration 3s
		before=($(cpu "$limiter") $(cpu "$redis_pid") $(syscalls "$limiter"))
		run_loadgen -duration "$DURATION" -summary-file "$work/max.env"
		after=($(cpu "$limiter") $(cpu "$redis_pid") $(syscalls "$limiter"))
		read -r x n < <(source "$work/max.env"; echo "$rps $requests")
		k=$v,$r
		tput[$k]=$x
		lim[$k]=$(per_decision $((after[0] - before[0])) "$n")
		red[$k]=$(per_decision $((after[1] - before[1])) "$n")
		sys[$k]=$(awk -v s=$((after[2] - before[2])) -v n="$n" 'BEGIN {printf "%.2f", s / n}')
		if [ -z "$FLOOR" ]; then
			run_loadgen -rate "$(awk -v r="$x" 'BEGIN {printf "%d", r / 2}')" -warmup "$HALF_WARMUP" -duration "$DURATION" -summary-file "$work/half.env"
			read -r "p50[$k]" "p99[$k]" < <(source "$work/half.env"; echo "$p50_ms $p99_ms")
			printf '| %d | %s | %s | %s | %s | %s | %s | %s |\n' "$r" "${bins[v]}" "${tput[$k]}" "${lim[$k]}" "${red[$k]}" "${sys[$k]}" "${p50[$k]}" "${p99[$k]}"
		else
			half_cpu "$limiter"
			hlim[$k]=$hcpu p50[$k]=$hp50 p99[$k]=$hp99
			# The answer the load's requests get (loadgen's client 0 is 100.64.0.0).
			curl -fsS -i "http://$LIMITER_ADDR/v1/check" -H 'Content-Type: application/json' \
				-d '{"ip":"100.64.0.0","endpoint":"/ab/books/17","method":"GET"}' >"$work/answer.http"
		fi
		for p in "$limiter" "$broker"; do kill -TERM "$p"; wait "$p" 2>/dev/null || true; done
		pids=()
		if [ -n "$FLOOR" ]; then
			floor_run "$v" "$r"
			printf '| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$r" "${bins[v]}" "${tput[$k]}" "${ftput[$k]}" \
				"$(awk -v a="${tput[$k]}" -v b="${ftput[$k]}" 'BEGIN {printf "%.2f", a / b}')" "${lim[$k]}" "${flim[$k]}" \
				"$(awk -v a="${lim[$k]}" -v b="${flim[$k]}" 'BEGIN {printf "%.2f", a / b}')" "${red[$k]}" "${hlim[$k]}" "${fhlim[$k]}" \
				"$(awk -v a="${hlim[$k]}" -v b="${fhlim[$k]}" 'BEGIN {printf "%.2f", a / b}')" "${p50[$k]}" "${p99[$k]}" "${fp99[$k]}" \
				"$(awk -v a="${p99[$k]}" -v b="${fp99[$k]}" 'BEGIN {printf "%.2f", a / b}')"
		fi
	done
	[ -z "$FLOOR" ] || continue # the builds' ratios to the floor stand in their rows
	printf '| %d | B ÷ A | %s | %s | %s | %s | %s | %s |\n' "$r" \
		"$(awk -v a="${tput[0,$r]}" -v b="${tput[1,$r]}" 'BEGIN {printf "%.2f", b / a}')" \
		"$(awk -v a="${lim[0,$r]}" -v b="${lim[1,$r]}" 'BEGIN {printf "%.2f", b / a}')" \
		"$(awk -v a="${red[0,$r]}" -v b="${red[1,$r]}" 'BEGIN {printf "%.2f", b / a}')" \
		"$(awk -v a="${sys[0,$r]}" -v b="${sys[1,$r]}" 'BEGIN {printf "%.2f", b / a}')" \
		"$(awk -v a="${p50[0,$r]}" -v b="${p50[1,$r]}" 'BEGIN {printf "%.2f", b / a}')" \
		"$(awk -v a="${p99[0,$r]}" -v b="${p99[1,$r]}" 'BEGIN {printf "%.2f", b / a}')"
done
