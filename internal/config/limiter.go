package config

import (
	"net/netip"
	"os"
	"time"
)

// Limiter is the configuration of cmd/limiter.
type Limiter struct {
	ListenAddr        string
	RedisURL          string
	RedisClusterAddrs []string
	RedisKeyPrefix    string
	RedisTimeout      time.Duration
	RedisPipelines    int
	PipelineLimit     int
	PipelineWindow    time.Duration
	KafkaBrokers      []string
	DecisionsTopic    string
	BansTopic         string
	EventQueueSize    int
	RulesFile         string
	AdminToken        string
	TrustedProxies    []netip.Prefix
	AuthDenyStatus    int
	Instance          string
	LogLevel          string
	LogFormat         string
	ShutdownTimeout   time.Duration
}

// LoadLimiter reads the limiter's configuration through getenv (os.Getenv in
// production, a map in tests).
func LoadLimiter(getenv func(string) string) (Limiter, error) {
	e := &env{getenv: getenv}
	hostname, _ := os.Hostname()
	c := Limiter{
		ListenAddr:        e.str("LISTEN_ADDR", ":8080"),
		RedisURL:          e.str("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisClusterAddrs: e.hostPorts("REDIS_CLUSTER_ADDRS", ""),
		RedisKeyPrefix:    e.str("REDIS_KEY_PREFIX", "rw:"),
		RedisTimeout:      e.duration("REDIS_TIMEOUT", 50*time.Millisecond),
		RedisPipelines:    e.integer("REDIS_PIPELINES", 4, 1, 1024),
		PipelineLimit:     e.integer("REDIS_PIPELINE_LIMIT", 64, 1, 10000),
		PipelineWindow:    e.durationOrZero("REDIS_PIPELINE_WINDOW", 0),
		KafkaBrokers:      e.hostPorts("KAFKA_BROKERS", "127.0.0.1:9092"),
		DecisionsTopic:    e.str("DECISIONS_TOPIC", "ratelimit.decisions"),
		BansTopic:         e.str("BANS_TOPIC", "ratelimit.bans"),
		EventQueueSize:    e.integer("EVENT_QUEUE_SIZE", 10000, 1, 10_000_000),
		RulesFile:         e.str("RULES_FILE", "deploy/rules.example.yaml"),
		AdminToken:        e.str("ADMIN_TOKEN", ""),
		TrustedProxies:    e.prefixes("TRUSTED_PROXIES"),
		AuthDenyStatus:    e.integer("AUTH_DENY_STATUS", 429, 401, 429),
		Instance:          e.str("INSTANCE_ID", hostname),
		LogLevel:          e.oneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		LogFormat:         e.oneOf("LOG_FORMAT", "json", "json", "console"),
		ShutdownTimeout:   e.duration("SHUTDOWN_TIMEOUT", 10*time.Second),
	}
	switch c.AuthDenyStatus {
	case 401, 403, 429:
	default:
		e.fail("AUTH_DENY_STATUS", "401, 403 or 429", getenv("AUTH_DENY_STATUS"))
	}
	if _, _, err := splitHostPort(c.ListenAddr); err != nil {
		e.fail("LISTEN_ADDR", "host:port or :port", c.ListenAddr)
	}
	if c.Instance == "" {
		c.Instance = "limiter"
	}
	return c, e.err()
}
