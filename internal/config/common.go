package config

import (
	"errors"
	"time"
)

// Common is the configuration the services share: Redis, Kafka, rules,
// logging, identity and shutdown. Each fills the part it reads (the
// archiver: Kafka, logging and shutdown).
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
	OutcomesTopic       string
	RulesFile           string
	Instance            string
	LogLevel            string
	LogFormat           string
	ShutdownTimeout     time.Duration

	// CaseSensitiveUserIDs keys user ids exactly as sent
	// (rules.Options.CaseSensitiveUserIDs).
	CaseSensitiveUserIDs bool
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
