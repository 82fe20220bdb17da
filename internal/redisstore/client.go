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
	// unless ClusterAddrs is set.
	URL          string
	ClusterAddrs []string
	// Timeout bounds each socket read and write.
	Timeout time.Duration
	// PoolSize is the connections per node (0: go-redis's default).
	PoolSize int
}

// Connect returns a client for a single Redis or a cluster.
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

// Target names the Redis of cfg for logs, without its password.
func (cfg ClientConfig) Target() string {
	if len(cfg.ClusterAddrs) > 0 {
		return "cluster " + strings.Join(cfg.ClusterAddrs, ",")
	}
	if u, err := url.Parse(cfg.URL); err == nil {
		return u.Redacted()
	}
	return "(unparsable REDIS_URL)"
}
