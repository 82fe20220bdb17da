package redisstore

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientConfig selects and tunes the Redis client.
type ClientConfig struct {
	// URL of a single Redis (redis://[user:password@]host:port/db), used
	// unless ClusterAddrs or SentinelAddrs is set. With Sentinel, only its
	// user, password and db are used.
	URL          string
	ClusterAddrs []string
	// SentinelAddrs and SentinelMaster select a primary through Redis
	// Sentinel; the client follows failovers.
	SentinelAddrs  []string
	SentinelMaster string
	// Timeout bounds each socket read and write.
	Timeout time.Duration
	// PoolSize is the connections per node (0: go-redis's default).
	PoolSize int
}

// Connect returns a client for a single Redis, a cluster, or a primary
// found through Sentinel.
func Connect(cfg ClientConfig) (redis.UniversalClient, error) {
	if len(cfg.ClusterAddrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 cfg.ClusterAddrs,
			DialTimeout:           time.Second,
			ReadTimeout:           cfg.Timeout,
			WriteTimeout:          cfg.Timeout,
			ContextTimeoutEnabled: true,
			PoolSize:              cfg.PoolSize,
		}), nil
	}
	if len(cfg.SentinelAddrs) > 0 {
		return connectSentinel(cfg)
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: expected redis://[user:password@]host:port/db: %w", err)
	}
	opts.DialTimeout = time.Second
	opts.ReadTimeout = cfg.Timeout
	opts.WriteTimeout = cfg.Timeout
	opts.ContextTimeoutEnabled = true
	opts.PoolSize = max(opts.PoolSize, cfg.PoolSize)
	return redis.NewClient(opts), nil
}

func connectSentinel(cfg ClientConfig) (redis.UniversalClient, error) {
	if cfg.SentinelMaster == "" {
		return nil, fmt.Errorf("REDIS_SENTINEL_MASTER: required with REDIS_SENTINEL_ADDRS")
	}
	fo := &redis.FailoverOptions{
		MasterName:            cfg.SentinelMaster,
		SentinelAddrs:         cfg.SentinelAddrs,
		DialTimeout:           time.Second,
		ReadTimeout:           cfg.Timeout,
		WriteTimeout:          cfg.Timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
	}
	if cfg.URL != "" {
		opts, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: expected redis://[user:password@]host:port/db: %w", err)
		}
		fo.Username, fo.Password, fo.DB = opts.Username, opts.Password, opts.DB
	}
	return redis.NewFailoverClient(fo), nil
}

// Target names the Redis of cfg for logs, without its password.
func (cfg ClientConfig) Target() string {
	if len(cfg.ClusterAddrs) > 0 {
		return "cluster " + strings.Join(cfg.ClusterAddrs, ",")
	}
	if len(cfg.SentinelAddrs) > 0 {
		return "sentinel " + cfg.SentinelMaster + "@" + strings.Join(cfg.SentinelAddrs, ",")
	}
	if u, err := url.Parse(cfg.URL); err == nil {
		return u.Redacted()
	}
	return "(unparsable REDIS_URL)"
}
