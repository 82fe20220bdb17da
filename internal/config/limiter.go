package config

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
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
	LateReplyWait  time.Duration // REDIS_LATE_REPLY_WAIT
	OverLimitCache int           // entries; 0: off
	LocalMaxKeys   int           // keys of local-mode state
	// LocalExpectedInstances is the fewest live limiters local mode
	// divides a limit among; LocalStateDir, when set, keeps the last
	// count of live limiters across restarts.
	LocalExpectedInstances int
	LocalStateDir          string
	// Leases of leased rules (package lease): the traffic a lease covers,
	// the keys tracked, and when an idle key's lease goes back.
	LeaseHorizon   time.Duration
	LeaseMaxKeys   int
	LeaseIdle      time.Duration
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
	RedisHealthInterval time.Duration
	// RedisCheckTimeout bounds the round trips on no request's path:
	// health checks, warm-up steps, the breaker's probe.
	RedisCheckTimeout    time.Duration
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
	// XDS, with ConfigType ConfigXDS, is the management server the RLS
	// config comes from instead of RLSConfigDir.
	ConfigType string
	XDS        XDS
}

// The config types (CONFIG_TYPE, envoyproxy/ratelimit's): where the RLS
// config comes from.
const (
	ConfigFile = "FILE"          // RLS_CONFIG_DIR
	ConfigXDS  = "GRPC_XDS_SOTW" // an xDS management server, state of the world
)

// XDS is the xDS management server of the RLS config and how the limiter
// follows it; names and defaults are envoyproxy/ratelimit's.
type XDS struct {
	ServerURL    string
	NodeID       string
	NodeMetadata map[string]string // Node.metadata, string values
	Headers      map[string]string // gRPC metadata of the stream
	// TLS is the client's TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS and its
	// files); nil: plaintext.
	TLS                                   *tls.Config
	UseTLS                                bool
	ClientCertFile, ClientKeyFile, CAFile string
	ServerSAN                             string
	// ConnectRetryInterval is read and changes nothing, as in
	// envoyproxy/ratelimit (its retry interceptor is never armed).
	ConnectRetryInterval time.Duration
	// The wait before reconnecting: BackoffInitial × BackoffFactor^n,
	// jittered between BackoffInitial and that when BackoffJitter, within
	// [BackoffInitial, BackoffMax].
	BackoffInitial, BackoffMax time.Duration
	BackoffFactor              float64
	BackoffJitter              bool
	MaxMsgSize                 int // bytes a response may have; 0: gRPC's default (4 MiB)
	// ForceStart starts the limiter without waiting for the first config.
	ForceStart bool
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
	var c Limiter
	e := newEnv(LimiterProcess, getenv)
	e.load(&dest{common: &c.Common, limiter: &c})
	e.redisTopology(c.Common)
	c.TLS = e.serverTLS(c.TLSFiles)
	e.xds(&c)
	e.distinctAddrs(map[string]string{"LISTEN_ADDR": c.ListenAddr, "OPS_LISTEN_ADDR": c.OpsListenAddr,
		"PPROF_ADDR": c.PprofAddr, "GRPC_LISTEN_ADDR": c.RLS.GRPCListenAddr})
	return c, e.err()
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
