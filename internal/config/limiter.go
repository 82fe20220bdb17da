package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/redisstore"
)

// Limiter is the configuration of cmd/limiter.
type Limiter struct {
	Common
	ListenAddr string
	// MaxConnections bounds LISTEN_ADDR's open connections
	// (HTTP_MAX_CONNECTIONS); past it a new one is answered 503 and closed.
	MaxConnections int
	RedisPipelines int
	PipelineLimit  int
	PipelineWindow time.Duration
	PipelineWait   time.Duration
	OverLimitCache int // entries; 0: off
	LocalMaxKeys   int // keys of local-mode state
	EventQueueSize int
	BanResync      time.Duration
	AdminToken     string
	TrustedProxies []netip.Prefix
	AuthDenyStatus int

	// APITokens, when any, are the bearer tokens every decision request
	// must carry; none: decisions are open to whoever reaches the port.
	APITokens []string
	// TLS serves the decision listener over HTTPS, verifying client
	// certificates when TLSFiles.ClientCAFile is set; nil: plain HTTP.
	TLS      *tls.Config
	TLSFiles TLSFiles
	// OpsListenAddr, when set, serves /metrics, /readyz and the profiles on
	// a listener of their own, and no longer on ListenAddr.
	OpsListenAddr string

	// RedisWarmup bounds the warm-up before the limiter listens: Redis
	// connections, scripts and the ban set (see package warmup).
	RedisWarmup time.Duration

	// Redis failure handling: health checks (heartbeats), the breaker and
	// the mode machine's durations.
	RedisHealthInterval  time.Duration
	RedisFailedChecks    int
	RedisBreakerFailures int
	RedisRecoverAfter    time.Duration
	PermissiveAfter      time.Duration // 0: never permissive
	PermissiveDenyRules  bool

	// Dynamic rules (admin API, stored in Postgres) and reloading.
	DynamicRules bool
	DatabaseURL  string
	RulesPoll    time.Duration // how often the rules file and the rule store's version are read
	// RLSConfigDir is a directory of envoyproxy/ratelimit configuration
	// files whose descriptor rules join the rules file's; empty: none.
	RLSConfigDir string

	// PprofAddr, when set, serves net/http/pprof on a listener of its own.
	PprofAddr string

	// RLS is Envoy's rate limit service API.
	RLS RLS
}

// RLS configures Envoy's rate limit service API: the gRPC listener
// (RateLimitService v3 and grpc.health.v1) and what POST /json shares with
// it. Names follow envoyproxy/ratelimit's where it has them.
type RLS struct {
	// GRPCListenAddr is the gRPC listener; empty (GRPC_LISTEN_ADDR=off): none.
	GRPCListenAddr string
	// MaxConnectionAge and MaxConnectionAgeGrace close gRPC connections
	// after this long (0: never), so clients re-resolve and spread.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MaxConnections bounds the gRPC listener's open connections
	// (GRPC_MAX_CONNECTIONS); past it a new connection is closed at once.
	MaxConnections int
	// ResponseHeaders adds the RateLimit headers to answers, named by
	// LimitHeader, RemainingHeader and ResetHeader.
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// ShadowMode answers OK overall whatever the descriptors' codes.
	ShadowMode bool
	// AddressKey and EndpointKey are the descriptor keys whose values are
	// the client address (for bans and events) and the endpoint of events.
	AddressKey, EndpointKey string
}

// LoadLimiter reads the limiter's configuration through getenv (os.Getenv in
// production, a map in tests).
func LoadLimiter(getenv func(string) string) (Limiter, error) {
	e := &env{getenv: getenv}
	c := Limiter{
		Common:         e.common("limiter"),
		ListenAddr:     e.listen(":8080"),
		MaxConnections: e.integer("HTTP_MAX_CONNECTIONS", 10_000, 1, 10_000_000), // ops.DefaultMaxConns
		RedisPipelines: e.integer("REDIS_PIPELINES", 4, 1, 1024),
		PipelineLimit:  e.integer("REDIS_PIPELINE_LIMIT", 64, 1, 10000),
		PipelineWindow: e.durationOrZero("REDIS_PIPELINE_WINDOW", 0),
		PipelineWait:   e.durationOrZero("REDIS_PIPELINE_WAIT", redisstore.DefaultWait),
		OverLimitCache: e.integer("OVER_LIMIT_CACHE_SIZE", 100_000, 0, 100_000_000),
		LocalMaxKeys:   e.integer("LOCAL_MAX_KEYS", 100_000, 1_000, 100_000_000),
		EventQueueSize: e.integer("EVENT_QUEUE_SIZE", 10000, 1, 10_000_000),
		BanResync:      e.duration("BAN_RESYNC_INTERVAL", 30*time.Second),
		AdminToken:     adminToken(e),
		APITokens:      e.tokens("API_TOKENS"),
		TrustedProxies: e.prefixes("TRUSTED_PROXIES"),
		AuthDenyStatus: e.integer("AUTH_DENY_STATUS", 429, 401, 429),

		RedisWarmup: e.duration("REDIS_WARMUP_TIMEOUT", 5*time.Second),

		RedisHealthInterval:  e.duration("REDIS_HEALTH_INTERVAL", 5*time.Second),
		RedisFailedChecks:    e.integer("REDIS_FAILED_CHECKS", 3, 1, 1000),
		RedisBreakerFailures: e.integer("REDIS_BREAKER_FAILURES", 5, 1, 1_000_000),
		RedisRecoverAfter:    e.duration("REDIS_RECOVER_AFTER", 60*time.Second),
		PermissiveAfter:      e.durationOrZero("PERMISSIVE_AFTER", 5*time.Minute),
		PermissiveDenyRules:  e.onOff("LIMITER_PERMISSIVE_DENY_RULES", false),

		DynamicRules: e.onOff("DYNAMIC_RULES", true),
		DatabaseURL:  e.str("DATABASE_URL", DefaultDatabaseURL),
		RulesPoll:    e.duration("RULES_POLL_INTERVAL", time.Second),
		RLSConfigDir: e.readableDir("RLS_CONFIG_DIR"),

		PprofAddr:     e.str("PPROF_ADDR", ""),
		OpsListenAddr: e.str("OPS_LISTEN_ADDR", ""),
		TLSFiles: TLSFiles{
			CertFile:     e.str("TLS_CERT_FILE", ""),
			KeyFile:      e.str("TLS_KEY_FILE", ""),
			ClientCAFile: e.str("TLS_CLIENT_CA_FILE", ""),
		},
	}
	c.RLS = loadRLS(e)
	c.TLS = e.serverTLS(c.TLSFiles)
	if c.PprofAddr != "" && !validHostPort(c.PprofAddr, false) {
		e.fail("PPROF_ADDR", "host:port or :port", c.PprofAddr)
	}
	if c.OpsListenAddr != "" && !validHostPort(c.OpsListenAddr, false) {
		e.fail("OPS_LISTEN_ADDR", "host:port or :port", c.OpsListenAddr)
	}
	e.distinctAddrs(map[string]string{"LISTEN_ADDR": c.ListenAddr, "OPS_LISTEN_ADDR": c.OpsListenAddr,
		"PPROF_ADDR": c.PprofAddr, "GRPC_LISTEN_ADDR": c.RLS.GRPCListenAddr})
	switch c.AuthDenyStatus {
	case 401, 403, 429:
	default:
		e.fail("AUTH_DENY_STATUS", "401, 403 or 429", getenv("AUTH_DENY_STATUS"))
	}
	return c, e.err()
}

// loadRLS reads the settings of Envoy's rate limit API.
func loadRLS(e *env) RLS {
	r := RLS{
		GRPCListenAddr:        e.str("GRPC_LISTEN_ADDR", ":8083"),
		MaxConnectionAge:      e.durationOrZero("GRPC_MAX_CONNECTION_AGE", 0),
		MaxConnectionAgeGrace: e.durationOrZero("GRPC_MAX_CONNECTION_AGE_GRACE", 0),
		MaxConnections:        e.integer("GRPC_MAX_CONNECTIONS", 1024, 1, 1_000_000), // rlsapi.DefaultMaxConnections
		ResponseHeaders:       e.onOff("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		LimitHeader:           e.headerName("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader:       e.headerName("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:           e.headerName("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		ShadowMode:            e.onOff("SHADOW_MODE", false),
		AddressKey:            e.str("RLS_ADDRESS_KEY", "remote_address"),
		EndpointKey:           e.str("RLS_ENDPOINT_KEY", "path"),
	}
	for _, k := range []struct{ name, value string }{{"RLS_ADDRESS_KEY", r.AddressKey}, {"RLS_ENDPOINT_KEY", r.EndpointKey}} {
		if k.value == "" || len(k.value) > 256 || strings.ContainsFunc(k.value, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			e.fail(k.name, "a descriptor key (1 to 256 bytes, no control characters)", k.value)
		}
	}
	switch {
	case r.GRPCListenAddr == "off":
		r.GRPCListenAddr = ""
	case !validHostPort(r.GRPCListenAddr, false):
		e.fail("GRPC_LISTEN_ADDR", "host:port, :port or off", r.GRPCListenAddr)
	}
	return r
}

// adminToken reads ADMIN_TOKEN, held to the rules of API_TOKENS (one
// token).
func adminToken(e *env) string {
	if raw := e.str("ADMIN_TOKEN", ""); strings.Contains(raw, ",") {
		e.errs = append(e.errs, errors.New("ADMIN_TOKEN: expected one token, got a comma-separated list"))
		return raw
	}
	if t := e.tokens("ADMIN_TOKEN"); len(t) == 1 {
		return t[0]
	}
	return ""
}

// distinctAddrs fails when two of the listeners share an address: the second
// would fail to bind after the warm-up. Port 0 (any free port) is never
// shared.
func (e *env) distinctAddrs(addrs map[string]string) {
	names := make([]string, 0, len(addrs))
	for n := range addrs {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, a := range names {
		for _, b := range names[i+1:] {
			if addrs[a] != "" && addrs[a] == addrs[b] && !strings.HasSuffix(addrs[a], ":0") {
				e.errs = append(e.errs, fmt.Errorf("%s and %s: both are %s, expected different addresses", a, b, addrs[a]))
			}
		}
	}
}

// onOff reads a boolean (true/false, 1/0).
func (e *env) onOff(name string, def bool) bool {
	raw := e.str(name, "")
	if raw == "" {
		return def
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		e.fail(name, "true or false", raw)
		return def
	}
	return v
}

// headerName reads an HTTP header name (a token of RFC 9110: letters,
// digits and !#$%&'*+-.^_`|~).
func (e *env) headerName(name, def string) string {
	v := e.str(name, def)
	ok := v != "" && len(v) <= 128
	for i := 0; ok && i < len(v); i++ {
		c := v[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
	if !ok {
		e.fail(name, "an HTTP header name (at most 128 letters, digits or !#$%&'*+-.^_`|~)", v)
	}
	return v
}
