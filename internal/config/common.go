package config

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Common is the configuration every service shares: Redis, Kafka, rules,
// logging, identity and shutdown.
type Common struct {
	RedisURL          string
	RedisClusterAddrs []string
	// RedisSentinelAddrs and RedisSentinelMaster, set together, find the
	// primary through Redis Sentinel (REDIS_URL then gives only user,
	// password and db).
	RedisSentinelAddrs  []string
	RedisSentinelMaster string
	RedisKeyPrefix      string
	RedisTimeout        time.Duration
	KafkaBrokers        []string
	DecisionsTopic      string
	BansTopic           string
	RulesFile           string
	Instance            string
	LogLevel            string
	LogFormat           string
	ShutdownTimeout     time.Duration
}

func (e *env) common(defaultInstance string) Common {
	hostname, _ := os.Hostname()
	if hostname == "" {
		hostname = defaultInstance
	}
	c := Common{
		RedisURL:            e.str("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisClusterAddrs:   e.hostPorts("REDIS_CLUSTER_ADDRS", ""),
		RedisSentinelAddrs:  e.hostPorts("REDIS_SENTINEL_ADDRS", ""),
		RedisSentinelMaster: e.str("REDIS_SENTINEL_MASTER", ""),
		RedisKeyPrefix:      e.str("REDIS_KEY_PREFIX", "rw:"),
		RedisTimeout:        e.duration("REDIS_TIMEOUT", 50*time.Millisecond),
		KafkaBrokers:        e.hostPorts("KAFKA_BROKERS", "127.0.0.1:9092"),
		DecisionsTopic:      e.str("DECISIONS_TOPIC", "ratelimit.decisions"),
		BansTopic:           e.str("BANS_TOPIC", "ratelimit.bans"),
		RulesFile:           e.str("RULES_FILE", "deploy/rules.example.yaml"),
		Instance:            e.str("INSTANCE_ID", hostname),
		LogLevel:            e.oneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		LogFormat:           e.oneOf("LOG_FORMAT", "json", "json", "console"),
		ShutdownTimeout:     e.duration("SHUTDOWN_TIMEOUT", 10*time.Second),
	}
	e.redisTopology(c)
	e.instance(c.Instance)
	return c
}

// instance checks INSTANCE_ID against the bound of the instance field of
// decision events: the detector and the archiver refuse a longer one.
func (e *env) instance(id string) {
	if len(id) > event.MaxName || !utf8.ValidString(id) {
		e.fail("INSTANCE_ID", fmt.Sprintf("valid UTF-8 of at most %d bytes", event.MaxName), id[:min(len(id), 64)]+"...")
	}
}

// redisTopology checks that at most one of cluster and Sentinel is chosen,
// and that Sentinel has both its addresses and its master name.
func (e *env) redisTopology(c Common) {
	sentinel := len(c.RedisSentinelAddrs) > 0 || c.RedisSentinelMaster != ""
	switch {
	case len(c.RedisSentinelAddrs) > 0 && c.RedisSentinelMaster == "":
		e.errs = append(e.errs, errors.New("REDIS_SENTINEL_MASTER: required when REDIS_SENTINEL_ADDRS is set"))
	case len(c.RedisSentinelAddrs) == 0 && c.RedisSentinelMaster != "":
		e.errs = append(e.errs, errors.New("REDIS_SENTINEL_ADDRS: required when REDIS_SENTINEL_MASTER is set"))
	}
	if sentinel && len(c.RedisClusterAddrs) > 0 {
		e.errs = append(e.errs, errors.New("REDIS_CLUSTER_ADDRS and REDIS_SENTINEL_ADDRS: choose one Redis topology, not both"))
	}
}

func (e *env) listen(def string) string {
	addr := e.str("LISTEN_ADDR", def)
	if !validHostPort(addr, false) {
		e.fail("LISTEN_ADDR", "host:port or :port", addr)
	}
	return addr
}
