package config

import (
	"os"
	"time"
)

// Common is the configuration every service shares: Redis, Kafka, rules,
// logging, identity and shutdown.
type Common struct {
	RedisURL          string
	RedisClusterAddrs []string
	RedisKeyPrefix    string
	RedisTimeout      time.Duration
	KafkaBrokers      []string
	DecisionsTopic    string
	BansTopic         string
	RulesFile         string
	Instance          string
	LogLevel          string
	LogFormat         string
	ShutdownTimeout   time.Duration
}

func (e *env) common(defaultInstance string) Common {
	hostname, _ := os.Hostname()
	if hostname == "" {
		hostname = defaultInstance
	}
	return Common{
		RedisURL:          e.str("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisClusterAddrs: e.hostPorts("REDIS_CLUSTER_ADDRS", ""),
		RedisKeyPrefix:    e.str("REDIS_KEY_PREFIX", "rw:"),
		RedisTimeout:      e.duration("REDIS_TIMEOUT", 50*time.Millisecond),
		KafkaBrokers:      e.hostPorts("KAFKA_BROKERS", "127.0.0.1:9092"),
		DecisionsTopic:    e.str("DECISIONS_TOPIC", "ratelimit.decisions"),
		BansTopic:         e.str("BANS_TOPIC", "ratelimit.bans"),
		RulesFile:         e.str("RULES_FILE", "deploy/rules.example.yaml"),
		Instance:          e.str("INSTANCE_ID", hostname),
		LogLevel:          e.oneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		LogFormat:         e.oneOf("LOG_FORMAT", "json", "json", "console"),
		ShutdownTimeout:   e.duration("SHUTDOWN_TIMEOUT", 10*time.Second),
	}
}

func (e *env) listen(def string) string {
	addr := e.str("LISTEN_ADDR", def)
	if _, _, err := splitHostPort(addr); err != nil {
		e.fail("LISTEN_ADDR", "host:port or :port", addr)
	}
	return addr
}
