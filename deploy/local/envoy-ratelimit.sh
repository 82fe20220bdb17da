#!/usr/bin/env bash
# deploy/local/envoy-ratelimit.sh: envoyproxy/ratelimit as a limiter build
# of deploy/local/ab.sh, so that the two run side by side under the same
# load:  deploy/local/ab.sh deploy/local/envoy-ratelimit.sh bin/limiter
# It translates the environment ab.sh gives a limiter into envoyproxy/
# ratelimit's own: LISTEN_ADDR (its PORT, serving POST /json and
# /healthcheck), GRPC_LISTEN_ADDR (GRPC_PORT), REDIS_URL (REDIS_URL host:port
# over tcp), REDIS_KEY_PREFIX (CACHE_KEY_PREFIX), and the files of
# RLS_CONFIG_DIR, less the settings that are ratewarden's extension
# (algorithm, lease), as its runtime configuration; statsd off, its
# defaults otherwise (REDIS_POOL_SIZE 10, REDIS_PIPELINE_WINDOW 0).
# The binary is ENVOY_RATELIMIT_BIN (default /tmp/rlbin/service_cmd),
# built outside this repository, for instance with
#   GOBIN=/tmp/rlbin go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
# DEBUG_ADDR is its debug listener (default 127.0.0.1:16070).
set -euo pipefail
bin=${ENVOY_RATELIMIT_BIN:-/tmp/rlbin/service_cmd}
[ -x "$bin" ] || { echo "envoy-ratelimit.sh: $bin not found: set ENVOY_RATELIMIT_BIN" >&2; exit 1; }
: "${LISTEN_ADDR:?}" "${GRPC_LISTEN_ADDR:?}" "${RLS_CONFIG_DIR:?}" "${REDIS_URL:?}"
debug=${DEBUG_ADDR:-127.0.0.1:16070}
# Beside RLS_CONFIG_DIR, so that whoever removes that removes this too.
runtime="${RLS_CONFIG_DIR%/}.envoy-ratelimit"
rm -rf "$runtime"
mkdir -p "$runtime/ratelimit/config"
for f in "$RLS_CONFIG_DIR"/*.yaml; do
	sed -E 's/, *(algorithm|lease): *[a-z_]+//g' "$f" >"$runtime/ratelimit/config/$(basename "$f")"
done
redis=${REDIS_URL#redis://}
redis=${redis%%/*}
export HOST=${LISTEN_ADDR%:*} PORT=${LISTEN_ADDR##*:} GRPC_HOST=${GRPC_LISTEN_ADDR%:*} GRPC_PORT=${GRPC_LISTEN_ADDR##*:} \
	DEBUG_HOST=${debug%:*} DEBUG_PORT=${debug##*:} USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL=$redis \
	CACHE_KEY_PREFIX=${REDIS_KEY_PREFIX:-} RUNTIME_ROOT=$runtime RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	LOG_LEVEL=warn
exec "$bin"
