package config

import (
	"net/netip"
	"time"
)

// limiterVars are the rows only the limiter reads.
var limiterVars = []Var{
	{Name: "OPS_LISTEN_ADDR", Readers: limiterOnly,
		Meaning: "`host:port` of a listener of its own for `/metrics`, `/readyz`, `/healthz` and pprof (`/debug/pprof/`), " +
			"which then leave `LISTEN_ADDR` (but `/healthz`, for gateways' health checks): expose the decision port to gateways only. Plain HTTP",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.OpsListenAddr }), optionalListenAddr)},
	{Name: "API_TOKENS", Readers: limiterOnly,
		Meaning: "comma-separated bearer tokens (several while you rotate), each at least 16 bytes of printable ASCII; " +
			"when set, `/v1/check`, `/v1/check/batch`, `/v1/report`, `/v1/report/batch`, `POST /json` and `/v1/auth` answer 401 " +
			"without `Authorization: Bearer <one of them>` (so do gRPC calls without it as metadata). " +
			"A holder may name any client: its checks and reports can get addresses banned and, with `lock_account`, accounts locked " +
			"(see [Security](security.md)), so give tokens to gateways and reporting applications only. " +
			"Empty: anyone who reaches the port may ask for decisions and send reports (a warning at start). " +
			"Placeholders such as `change-me-…` or `REPLACE-ME-…` are refused",
		load: bind(inLimiter(func(c *Limiter) *[]string { return &c.APITokens }), tokens)},
	{Name: "TLS_CERT_FILE", Readers: limiterOnly,
		Meaning: "PEM certificate (chain): `LISTEN_ADDR` serves HTTPS only (TLS 1.2+). With `TLS_KEY_FILE`, both or neither; " +
			"read at start, a missing file or a key of another certificate stops the start",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.TLSFiles.CertFile }), text)},
	{Name: "TLS_KEY_FILE", Readers: limiterOnly,
		Meaning: "PEM private key of `TLS_CERT_FILE`'s certificate",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.TLSFiles.KeyFile }), text)},
	{Name: "TLS_CLIENT_CA_FILE", Readers: limiterOnly,
		Meaning: "PEM certificates of the authorities that issue the gateways' client certificates: with it, " +
			"`LISTEN_ADDR` requires and verifies a client certificate in the handshake (mTLS). Needs `TLS_CERT_FILE`",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.TLSFiles.ClientCAFile }), text)},
	{Name: "TRUSTED_PROXIES", Readers: limiterOnly,
		Meaning: "IPs/CIDRs whose `X-Forwarded-For` / `X-Real-IP` are believed on `/v1/auth`",
		load:    bind(inLimiter(func(c *Limiter) *[]netip.Prefix { return &c.TrustedProxies }), prefixes)},
	{Name: "AUTH_DENY_STATUS", Default: "429", Readers: limiterOnly,
		Meaning: "status of a rate-limited `/v1/auth` call: `429`, `403`, or `401` for nginx `auth_request` (see [Gateway integration](api.md#gateway-integration))",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.AuthDenyStatus }), intOneOf(401, 403, 429))},
	{Name: "ADMIN_TOKEN", Readers: limiterOnly,
		Meaning: "bearer token of the admin API, held to `API_TOKENS`' rules (16 bytes at least, no placeholder); empty: the admin API is off (404)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.AdminToken }), adminToken)},
	{Name: "HTTP_MAX_CONNECTIONS", Default: "10000", Readers: limiterOnly,
		Meaning: "open connections of `LISTEN_ADDR`, 1 to 10 000 000; one more is answered 503 and closed (see [Limits on what a client can send](api.md#limits-on-what-a-client-can-send))",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.MaxConnections }), intBetween(1, 10_000_000))},
	{Name: "PPROF_ADDR", Readers: limiterOnly,
		Meaning: "`host:port` of a listener serving `net/http/pprof` (CPU, heap, allocations, goroutines, trace); empty: off. " +
			"Keep it on loopback or a private network (`OPS_LISTEN_ADDR` serves the same profiles)",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.PprofAddr }), optionalListenAddr)},

	{Name: "REDIS_WARMUP_TIMEOUT", Default: "5s", Readers: limiterOnly,
		Meaning: "longest the limiter waits at start for its warm-up (Redis connected, scripts on every primary, bans loaded) " +
			"before opening its port; past it, it starts without, in `local` mode (see [the warm-up](operations.md#start-the-warm-up))",
		load: bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RedisWarmup }), positiveDuration)},
	{Name: "REDIS_CHECK_TIMEOUT", Default: "1s", Readers: limiterOnly,
		Meaning: "deadline of the round trips that are on no request's path: a health check (heartbeat), each warm-up step's, " +
			"the ping that tells a slow node from a dead one before its breaker opens. Longer than `REDIS_TIMEOUT`, so a Redis " +
			"that answers late is taken as slow, not down: it keeps deciding in `redis` mode (see [Failure modes](operations.md#failure-modes))",
		load: bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RedisCheckTimeout }), positiveDuration)},
	{Name: "REDIS_BREAKER_FAILURES", Default: "5", Readers: limiterOnly,
		Meaning: "failed round trips in a row to one Redis node that open its breaker (the only one): its calls then fail at once, " +
			"and when every node a decision needs is behind an open breaker the limiter goes to `local` mode. A node whose round trips " +
			"timed out is pinged first, allowing it a second: one that answers is slow, not down, and its breaker stays closed",
		load: bind(inLimiter(func(c *Limiter) *int { return &c.RedisBreakerFailures }), intBetween(1, 1_000_000))},
	{Name: "REDIS_HEALTH_INTERVAL", Default: "5s", Readers: limiterOnly,
		Meaning: "health check and heartbeat period (also how live limiters are counted)",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RedisHealthInterval }), positiveDuration)},
	{Name: "REDIS_FAILED_CHECKS", Default: "3", Readers: limiterOnly,
		Meaning: "consecutive failed health checks that switch to `local` mode",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.RedisFailedChecks }), intBetween(1, 1000))},
	{Name: "REDIS_RECOVER_AFTER", Default: "60s", Readers: limiterOnly,
		Meaning: "healthy checks in a row needed to return to `redis` mode",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RedisRecoverAfter }), positiveDuration)},
	{Name: "PERMISSIVE_AFTER", Default: "5m", Readers: limiterOnly,
		Meaning: "time in `local` mode before `permissive` (`0`: never)",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.PermissiveAfter }), durationOrZero)},
	{Name: "LIMITER_PERMISSIVE_DENY_RULES", Default: "false", Readers: limiterOnly,
		Meaning: "`true`: rules with `on_redis_failure: deny` admit too in `permissive` mode (by default they keep answering 503)",
		load:    bind(inLimiter(func(c *Limiter) *bool { return &c.PermissiveDenyRules }), boolean)},
	{Name: "REDIS_PIPELINES", Default: "4", Readers: limiterOnly,
		Meaning: "Redis round trips in flight at once, per Redis node (per primary on a cluster); " +
			"concurrent decisions share them (pipelining)",
		load: bind(inLimiter(func(c *Limiter) *int { return &c.RedisPipelines }), intBetween(1, 1024))},
	{Name: "REDIS_LATE_REPLY_WAIT", Default: "1s", Readers: limiterOnly,
		Meaning: "how long a decision round trip's connection keeps reading the reply after `REDIS_TIMEOUT` answered its requests: " +
			"what Redis admitted for the requests refused meanwhile is then given back (`0`: the reply is dropped at `REDIS_TIMEOUT` " +
			"and what Redis counted stays until its window ends; see [Failure modes](operations.md#failure-modes))",
		load: bind(inLimiter(func(c *Limiter) *time.Duration { return &c.LateReplyWait }), durationOrZero)},
	{Name: "REDIS_PIPELINE_LIMIT", Default: "64", Readers: limiterOnly,
		Meaning: "most decisions sent in one round trip",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.PipelineLimit }), intBetween(1, 10000))},
	{Name: "REDIS_PIPELINE_WINDOW", Default: "0", Readers: limiterOnly,
		Meaning: "how long a round trip waits for more decisions; `0` sends at once (under light load a decision goes alone, at once)",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.PipelineWindow }), durationOrZero)},
	// The limiter's own default, measured (docs/performance.md: one round
	// trip at a time); redisstore.DefaultWait is the same, for benchmarks.
	{Name: "REDIS_PIPELINE_WAIT", Default: "200us", Readers: limiterOnly,
		Meaning: "how long decisions wait for a round trip in flight that is not full before another leaves beside it: " +
			"decisions arriving meanwhile go together in the next round trip, so with a nearby Redis, whose round trips come back sooner, " +
			"one is in flight at a time and each carries more (fewer system calls for Redis and the limiter); " +
			"with a distant one they still overlap, this far apart. A full round trip never waits. " +
			"The most it adds to a decision; `0`: a free connection sends at once. See [One round trip at a time](performance.md#one-round-trip-at-a-time)",
		load: bind(inLimiter(func(c *Limiter) *time.Duration { return &c.PipelineWait }), durationOrZero)},
	{Name: "LOCAL_MAX_KEYS", Default: "100000", Readers: limiterOnly,
		Meaning: "keys of local-mode state (in-memory limiting while Redis is away) a limiter may hold, 1 000 to 100 000 000; see [Local mode](operations.md#local-mode-deciding-without-redis)",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.LocalMaxKeys }), intBetween(1_000, 100_000_000))},
	{Name: "LOCAL_EXPECTED_INSTANCES", Default: "1", Readers: limiterOnly,
		Meaning: "the fewest limiter instances a limiter assumes in `local` mode, 1 to 10 000: each admits a rule's limit divided by " +
			"the live instances it counts, never by fewer than this. Set it to the size of the fleet so that limiters that start " +
			"while Redis is unreachable, and so never saw the others' heartbeats, admit at most the limit in all " +
			"(see [Local mode](operations.md#local-mode-deciding-without-redis))",
		load: bind(inLimiter(func(c *Limiter) *int { return &c.LocalExpectedInstances }), intBetween(1, 10_000))},
	{Name: "LOCAL_STATE_DIR", Readers: limiterOnly,
		Meaning: "a directory of the limiter's own where it keeps the last count of live instances (file `live-instances`), " +
			"written when the count changes and read at start: a limiter that restarts while Redis is unreachable divides " +
			"its local limits by it. Empty: no file",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.LocalStateDir }), text)},
	{Name: "LEASE_HORIZON", Default: "50ms", Readers: limiterOnly,
		Meaning: "the traffic a lease of a leased rule covers: a hot key's lease holds what this limiter admitted for it in the last horizon, at most the rule's `max_units`, and is renewed below half of it; at least 1ms. See [Leases](leases.md)",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.LeaseHorizon }), durationAtLeast(time.Millisecond, "50ms"))},
	{Name: "LEASE_MAX_KEYS", Default: "10000", Readers: limiterOnly,
		Meaning: "keys of leased rules a limiter tracks (their lease and recent rate, about 570 bytes of heap each, key included), 64 to 10 000 000; past it the least recently used of a sample is dropped and its lease given back",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.LeaseMaxKeys }), intBetween(64, 10_000_000))},
	{Name: "LEASE_IDLE", Default: "1s", Readers: limiterOnly,
		Meaning: "a key of a leased rule unused this long gives its lease back and is forgotten; at least 10ms",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.LeaseIdle }), durationAtLeast(10*time.Millisecond, "1s"))},
	{Name: "OVER_LIMIT_CACHE_SIZE", Default: "100000", Readers: limiterOnly,
		Meaning: "keys the over-limit cache may hold (denials answered from memory until their retry time, see [Over-limit cache](operations.md#over-limit-cache)); `0` turns it off",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.OverLimitCache }), intBetween(0, 100_000_000))},
	{Name: "BAN_RESYNC_INTERVAL", Default: "30s", Readers: limiterOnly,
		Meaning: "how often the limiter reloads the whole blacklist (changes arrive in between by pub/sub)",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.BanResync }), positiveDuration)},
	{Name: "EVENT_QUEUE_SIZE", Default: "10000", Readers: limiterOnly,
		Meaning: "events buffered for Kafka; beyond it events are dropped and counted, never waited for",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.EventQueueSize }), intBetween(1, 10_000_000))},

	{Name: "DYNAMIC_RULES", Default: "true", Readers: limiterOnly,
		Meaning: "`false`: the rules file alone, no database (the admin rules endpoints then do not exist)",
		load:    bind(inLimiter(func(c *Limiter) *bool { return &c.DynamicRules }), boolean)},
	{Name: "RULES_POLL_INTERVAL", Default: "1s", Readers: []Process{LimiterProcess, DetectorProcess},
		Meaning: "how often the rules file is read for changes and, by the limiter, the dynamic rules' version is polled " +
			"(changes are also announced over Redis, so this only bounds how late a missed announcement is made up)",
		load: bind(either(inLimiter(func(c *Limiter) *time.Duration { return &c.RulesPoll }),
			inDetector(func(c *Detector) *time.Duration { return &c.RulesPoll })), positiveDuration)},
	{Name: "RLS_CONFIG_DIR", Readers: limiterOnly,
		Meaning: "a directory of envoyproxy/ratelimit configuration files, loaded as they are and reloaded on change " +
			"(see [Descriptor rules](envoy.md#descriptor-rules-envoys-rate-limit-api)); empty: none",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.RLSConfigDir }), readableDir)},

	{Name: "GRPC_LISTEN_ADDR", Default: ":8083", Readers: limiterOnly,
		Meaning: "Envoy's rate limit API: `RateLimitService` v3 and `grpc.health.v1` over HTTP/2 " +
			"(TLS with the `TLS_*` files, `API_TOKENS` as `authorization` metadata); `off`: no gRPC listener. " +
			"`POST /json` is on `LISTEN_ADDR` either way",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.RLS.GRPCListenAddr }), grpcListenAddr)},
	{Name: "GRPC_MAX_CONNECTIONS", Default: "1024", Readers: limiterOnly,
		Meaning: "open connections of the gRPC listener, 1 to 1 000 000; one more is closed as soon as it is accepted " +
			"(see [What a caller without a token can hold](envoy.md#what-a-caller-without-a-token-can-hold))",
		load: bind(inLimiter(func(c *Limiter) *int { return &c.RLS.MaxConnections }), intBetween(1, 1_000_000))},
	{Name: "GRPC_MAX_CONNECTION_AGE", Default: "0", Readers: limiterOnly,
		Meaning: "close gRPC connections after this age (±10 %), then after `GRPC_MAX_CONNECTION_AGE_GRACE`: " +
			"gateways reconnect and spread over new instances; `0`: never",
		load: bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RLS.MaxConnectionAge }), durationOrZero)},
	{Name: "GRPC_MAX_CONNECTION_AGE_GRACE", Default: "0", Readers: limiterOnly,
		Meaning: "how long a gRPC connection past `GRPC_MAX_CONNECTION_AGE` may finish its calls before it is closed; `0`: no bound",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.RLS.MaxConnectionAgeGrace }), durationOrZero)},
	{Name: "LIMIT_RESPONSE_HEADERS_ENABLED", Default: "false", Readers: limiterOnly,
		Meaning: "`true`: rate limit API answers carry `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` " +
			"in `response_headers_to_add`; `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER` rename them",
		load: bind(inLimiter(func(c *Limiter) *bool { return &c.RLS.ResponseHeaders }), boolean)},
	{Name: "LIMIT_LIMIT_HEADER", Default: "RateLimit-Limit", Readers: limiterOnly,
		Meaning: "name of the header with the limit, with `LIMIT_RESPONSE_HEADERS_ENABLED`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.RLS.LimitHeader }), headerName)},
	{Name: "LIMIT_REMAINING_HEADER", Default: "RateLimit-Remaining", Readers: limiterOnly,
		Meaning: "name of the header with what remains of the limit, with `LIMIT_RESPONSE_HEADERS_ENABLED`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.RLS.RemainingHeader }), headerName)},
	{Name: "LIMIT_RESET_HEADER", Default: "RateLimit-Reset", Readers: limiterOnly,
		Meaning: "name of the header with the seconds until the limit resets, with `LIMIT_RESPONSE_HEADERS_ENABLED`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.RLS.ResetHeader }), headerName)},
	{Name: "SHADOW_MODE", Default: "false", Readers: limiterOnly,
		Meaning: "`true`: rate limit API calls answer `OK` overall whatever their descriptors' codes (envoyproxy/ratelimit's global shadow mode)",
		load:    bind(inLimiter(func(c *Limiter) *bool { return &c.RLS.ShadowMode }), boolean)},
	{Name: "RLS_ADDRESS_KEY", Default: "remote_address", Readers: limiterOnly,
		Meaning: "the descriptor key whose value is a rate limit call's client address (bans, exemptions, events)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.RLS.AddressKey }), descriptorKey)},
	{Name: "RLS_ENDPOINT_KEY", Default: "path", Readers: limiterOnly,
		Meaning: "the descriptor key whose value is a rate limit call's endpoint (events, exemptions)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.RLS.EndpointKey }), descriptorKey)},

	{Name: "GOGC", DefaultDoc: "unset", Readers: limiterOnly, Runtime: true,
		Meaning: "Go's own garbage-collector setting. Unset with `GOMEMLIMIT`, the limiter lets its heap grow to 64 MiB " +
			"before collecting while its live heap is small (see [Garbage collector](operations.md#garbage-collector)); " +
			"setting either turns that off and leaves the collector to them"},
	{Name: "GOMEMLIMIT", DefaultDoc: "unset", Readers: limiterOnly, Runtime: true,
		Meaning: "Go's own soft memory limit; setting it turns the limiter's 64 MiB heap floor off, as `GOGC` does"},
}
