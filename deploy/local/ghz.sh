# deploy/local/ghz.sh, sourced by ab.sh and bench.sh: Envoy's ShouldRateLimit
# driven by an independent client, ghz (github.com/bojand/ghz), with
# loadgen's flags, so that the figures over gRPC do not rest on the
# project's own load generator alone. ghz runs on the same cores as the
# limiter, as loadgen does.
#   ghz_setup WORK: ghz in $ghz (GHZ_BIN, else .local/bin/ghz, installed
#     there with go install at GHZ_VERSION when missing), and WORK/rls.protoset,
#     the service's descriptors written by deploy/local/rlsprotoset from
#     go-control-plane (the limiter serves no reflection; no binary file is
#     kept in the repository).
#   ghz_data DOMAIN KEYS FILE: KEYS requests of DOMAIN, one remote_address
#     descriptor each (10.0.0.0 on), as a JSON array, which ghz sends in
#     turn (parsed once: no template runs per call); with GHZ_TEMPLATE=1
#     one request whose address ghz draws at each call from KEYS values
#     (a call data template of randomInt: ghz then parses JSON at every
#     call, and spends more of the shared cores).
#   ghz_load [loadgen flags]: a run with -ghz-data FILE, -grpc-addr,
#     -grpc-conns (ghz --connections), -workers (-c), -duration, -rate with
#     -warmup (ghz --rps and --skipFirst: the latencies are from each
#     call's start, not its scheduled time), -token, -summary-file F (F gets
#     loadgen's names: rps, requests, errors, p50_ms, p99_ms, p999_ms, the
#     last n/a: ghz reports no p99.9); other flags are ignored.
ghz_setup() {
	ghz=${GHZ_BIN:-.local/bin/ghz}
	ghz_work=$1
	if [ ! -x "$ghz" ]; then
		[ -z "${GHZ_BIN:-}" ] || { echo "GHZ_BIN=$GHZ_BIN: not an executable" >&2; exit 2; }
		GOBIN="$PWD/.local/bin" go install "github.com/bojand/ghz/cmd/ghz@${GHZ_VERSION:-v0.93.0}"
	fi
	go run ./deploy/local/rlsprotoset -out "$ghz_work/rls.protoset"
}
ghz_data() {
	if [ "${GHZ_TEMPLATE:-}" = 1 ]; then
		local lo=$2 hi=1
		[ "$2" -le 256 ] || { lo=250 hi=$(($2 / 250)); }
		[ $((lo * hi)) = "$2" ] && [ "$hi" -le 256 ] || { echo "GHZ_TEMPLATE=1: KEYS=$2, want at most 256 or a multiple of 250 up to 64000" >&2; exit 2; }
		printf '{"domain":"%s","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.{{randomInt 0 %d}}.{{randomInt 0 %d}}"}]}]}\n' "$1" "$hi" "$lo" >"$3"
		return
	fi
	awk -v d="$1" -v n="$2" 'BEGIN {
		printf "["
		for (k = 0; k < n; k++) printf "%s{\"domain\":\"%s\",\"descriptors\":[{\"entries\":[{\"key\":\"remote_address\",\"value\":\"10.%d.%d.%d\"}]}]}", (k ? "," : ""), d, int(k / 65536) % 256, int(k / 256) % 256, k % 256
		print "]"
	}' >"$3"
}
ghz_load() {
	local data= addr= conns=1 workers=64 duration=3s rate=0 warmup=0s token= summary=/dev/null
	while [ $# -gt 0 ]; do
		case $1 in
		-ghz-data) data=$2 ;; -grpc-addr) addr=$2 ;; -grpc-conns) conns=$2 ;; -workers) workers=$2 ;;
		-duration) duration=$2 ;; -rate) rate=$2 ;; -warmup) warmup=$2 ;; -token) token=$2 ;; -summary-file) summary=$2 ;;
		esac
		shift 2
	done
	local secs skip=0 md=() d
	for d in "$duration" "$warmup"; do
		[[ $d =~ ^[0-9]+(\.[0-9]+)?s$ ]] || { echo "ghz_load: duration $d: want seconds, such as 10s" >&2; exit 2; }
	done
	secs=$(awk -v d="${duration%s}" -v w="${warmup%s}" 'BEGIN {print d + w}')
	[ "$rate" = 0 ] || skip=$(awk -v r="$rate" -v w="${warmup%s}" 'BEGIN {printf "%d", r * w}')
	[ -z "$token" ] || md=(-m "{\"authorization\":\"Bearer $token\"}")
	"$ghz" --insecure --protoset "$ghz_work/rls.protoset" --call envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit \
		-D "$data" "${md[@]}" -c "$workers" --connections "$conns" -z "${secs}s" --duration-stop ignore --rps "$rate" --skipFirst "$skip" \
		-O json -o "$ghz_work/ghz.out" "$addr" 2>"$ghz_work/ghz.err" || { cat "$ghz_work/ghz.err" >&2; exit 1; }
	# With a warm-up, .count leaves the skipped calls out but .rps does not:
	# the rate is the counted calls over the measured time.
	jq -r --argjson measured "${duration%s}" --argjson skip "$skip" '(.statusCodeDistribution // {} | to_entries | map(select(.key != "OK") | .value) | add // 0) as $errors
		| (.latencyDistribution // [] | map({key: (.percentage | tostring), value: (.latency / 1e6)}) | from_entries) as $p
		| (if $skip > 0 then .count / $measured else .rps end) as $rps
		| "rps=\($rps | . * 10 | round / 10)\nrequests=\(.count - $errors)\nerrors=\($errors)\np50_ms=\($p["50"])\np99_ms=\($p["99"])\np999_ms=n/a"' \
		"$ghz_work/ghz.out" >"$summary"
}
