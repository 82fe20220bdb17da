package redisstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	// Timeout bounds each socket read and write, SocketTimeout instead
	// when longer: a command whose context has a deadline waits until the
	// earlier of the two.
	Timeout       time.Duration
	SocketTimeout time.Duration
	// NoRetries: go-redis never sends a command again by itself. It
	// resends a pipeline whose write or read failed (a timeout included),
	// which may have run: a decision would then be counted twice, the first
	// time for nobody.
	NoRetries bool
	// PoolSize is the connections per node (0: go-redis's default).
	// Pipelines use them too: go-redis's separate pipeline pool is turned
	// off, since it never dials ahead, so a warm-up could not open its
	// connections and the first pipelines would dial in their deadline.
	PoolSize int
}

func (cfg ClientConfig) socketTimeout() time.Duration { return max(cfg.Timeout, cfg.SocketTimeout) }

// maxRetries is go-redis's MaxRetries for cfg: -1 is none, 0 its default.
func (cfg ClientConfig) maxRetries() int {
	if cfg.NoRetries {
		return -1
	}
	return 0
}

// noPipelinePool makes pipelines share the pool of single commands.
const noPipelinePool = -1

// Connect returns a client for a single Redis, a cluster, or a primary
// found through Sentinel.
func Connect(cfg ClientConfig) (redis.UniversalClient, error) {
	if len(cfg.ClusterAddrs) > 0 {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                      cfg.ClusterAddrs,
			DialTimeout:                time.Second,
			ReadTimeout:                cfg.socketTimeout(),
			WriteTimeout:               cfg.socketTimeout(),
			MaxRetries:                 cfg.maxRetries(),
			ContextTimeoutEnabled:      true,
			PoolSize:                   cfg.PoolSize,
			PipelinePoolSize:           noPipelinePool,
			ClusterStateReloadInterval: 10 * time.Second,
			MaintNotificationsConfig:   noMaintNotifications(),
		})
		c.AddHook(reloadOnFailure{c})
		return c, nil
	}
	if len(cfg.SentinelAddrs) > 0 {
		return connectSentinel(cfg)
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: expected redis://[user:password@]host:port/db: %w", err)
	}
	opts.DialTimeout = time.Second
	opts.ReadTimeout = cfg.socketTimeout()
	opts.WriteTimeout = cfg.socketTimeout()
	if cfg.NoRetries {
		opts.MaxRetries = cfg.maxRetries()
	}
	opts.ContextTimeoutEnabled = true
	opts.PoolSize = max(opts.PoolSize, cfg.PoolSize)
	opts.PipelinePoolSize = noPipelinePool
	opts.MaintNotificationsConfig = noMaintNotifications()
	return redis.NewClient(opts), nil
}

// noMaintNotifications turns off go-redis's maintenance notifications
// (a Redis Enterprise and cloud feature). Left to its default, "auto", every
// new connection first asks for them; when the server refuses, go-redis
// turns them off by writing its options under the lock of the client that
// dialed, which a Conn or PubSub of the same client does not hold: the
// race detector caught a subscription and a warm-up dial doing it at once.
// go-redis's failover client has them off already.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// reloadOnFailure makes a cluster client reload its slot map when a command
// fails for want of a node. go-redis reloads it on MOVED, ASK and READONLY
// replies and every ClusterStateReloadInterval, but a killed primary
// replies nothing: without this, calls would keep going to it after its
// replica took over. Reloads are asynchronous and coalesced by go-redis.
type reloadOnFailure struct{ client *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && nodeFailure(err) {
			h.client.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil { // the first command error, if any: nothing to look at
			return nil
		}
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && nodeFailure(e) {
				h.client.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

func connectSentinel(cfg ClientConfig) (redis.UniversalClient, error) {
	if cfg.SentinelMaster == "" {
		return nil, fmt.Errorf("REDIS_SENTINEL_MASTER: required with REDIS_SENTINEL_ADDRS")
	}
	fo := &redis.FailoverOptions{
		MasterName:            cfg.SentinelMaster,
		SentinelAddrs:         cfg.SentinelAddrs,
		DialTimeout:           time.Second,
		ReadTimeout:           cfg.socketTimeout(),
		WriteTimeout:          cfg.socketTimeout(),
		MaxRetries:            cfg.maxRetries(),
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
		PipelinePoolSize:      noPipelinePool,
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
