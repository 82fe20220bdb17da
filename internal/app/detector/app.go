// Package detector assembles the detector service: the rules file's
// detection (reloaded on change and on a signal), Redis, the ban
// publisher, one detector over its sources (decisions, outcomes,
// optionally a gateway's access log), their consumers and the ops
// listener, started in order and stopped in reverse.
// cmd/detector reads the environment and handles signals; this package is
// everything else, so a test can run detectors in the test's own process.
package detector

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/detector"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// Deps are what the detector takes from its host rather than from its
// configuration.
type Deps struct {
	// Log is the detector's logger; required.
	Log *zap.Logger
	// Registry holds the detector's metrics and is what /metrics serves;
	// required. A process uses telemetry.NewRegistry, a test a registry
	// of its own per detector.
	Registry *prometheus.Registry
	// Now is the detector's own clock, which bounds event time (see
	// abuse.Config.Now). Nil: time.Now.
	Now func() time.Time
	// Reload delivers the signals (SIGHUP) on which the rules file is
	// read again at once, besides every RULES_POLL_INTERVAL. Nil: none.
	Reload <-chan os.Signal
}

// App is one detector, from New to the end of Run.
type App struct {
	cfg    config.Detector
	log    *zap.Logger
	now    func() time.Time
	reload <-chan os.Signal
	// rules keeps the rules file current; set is the set it loaded at
	// start (what the start lines report), apply what puts a later one in
	// the engines.
	rules    *rulesync.Manager
	set      *rules.Set
	redisCfg redisstore.ClientConfig
	rdb      redis.UniversalClient
	// closeRedis and closePublisher close once, whether the group stops
	// them or Run finds them never started.
	closeRedis, closePublisher func() error
	// mu orders the engines' creation with the rule reloads.
	mu       sync.Mutex
	engine   *abuse.Engine
	outcomes *abuse.OutcomeEngine
	// ipv6Prefix is detection.ipv6_prefix in force, which the access
	// log's blacklist marker groups addresses by.
	ipv6Prefix atomic.Int64
	svc        *detector.Service
	ops        *ops.Listener
	group      *lifecycle.Group
}

// New loads the rules file, connects to Redis and the broker, and
// assembles the detector; nothing is consumed or served before Run. Once
// New has returned an App, Run must be called to release its clients,
// even with a context already ended.
func New(cfg config.Detector, deps Deps) (*App, error) {
	if deps.Log == nil || deps.Registry == nil {
		return nil, errors.New("detector: a logger and a registry are required")
	}
	a := &App{cfg: cfg, log: deps.Log, now: deps.Now, reload: deps.Reload}
	// The limiter's rule manager with the rules file alone (no rule store,
	// no RLS directory): the same reloads, refusals and metrics.
	a.rules = rulesync.New(rulesync.Config{File: cfg.RulesFile,
		Options: rules.Options{KeyPrefix: cfg.RedisKeyPrefix, CaseSensitiveUserIDs: cfg.CaseSensitiveUserIDs},
		Apply:   a.apply, FilePoll: cfg.RulesPoll, Log: deps.Log.Named("rules"), Registerer: deps.Registry})
	if err := a.rules.Start(context.Background()); err != nil {
		return nil, err
	}
	a.set = a.rules.View().Set
	if err := a.connect(deps); err != nil {
		return nil, err
	}
	a.ops = &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, Log: a.log, Handler: ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(deps.Registry),
		Probes: []ops.Probe{
			{Name: "redis", Required: true, Check: func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() }},
			{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
		},
		Log: a.log,
	})}
	a.group = a.parts()
	return a, nil
}

// connect opens Redis and the ban publisher and builds the detector over
// them; on an error it closes what it opened.
func (a *App) connect(deps Deps) error {
	cfg := a.cfg
	// Detection batches are pipelined and not on a request path: a longer
	// timeout than the limiter's suits them.
	a.redisCfg = redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs, SentinelAddrs: cfg.RedisSentinelAddrs,
		SentinelMaster: cfg.RedisSentinelMaster, Timeout: max(cfg.RedisTimeout, 2*time.Second)}
	rdb, err := redisstore.Connect(a.redisCfg)
	if err != nil {
		return err
	}
	a.rdb, a.closeRedis = rdb, sync.OnceValue(rdb.Close)
	publisher, err := kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic)
	if err != nil {
		_ = a.closeRedis()
		return err
	}
	a.closePublisher = sync.OnceValue(publisher.Close)
	if err := a.build(deps, rdb, publisher); err != nil {
		_ = a.closePublisher()
		_ = a.closeRedis()
		return err
	}
	return nil
}

// parts returns the detector's parts in their start order.
func (a *App) parts() *lifecycle.Group {
	g := lifecycle.New(a.log, a.cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "redis", Stop: func(context.Context) error { return a.closeRedis() }},
		lifecycle.Part{Name: "ban publisher", Stop: func(context.Context) error { return a.closePublisher() }},
		lifecycle.Part{Name: "ops listener", Start: a.ops.Listen, Run: a.ops.Serve, Stop: a.ops.Shutdown},
		lifecycle.Part{Name: "rules", Run: func(ctx context.Context) error { a.rules.Run(ctx, a.reload); return nil }},
	)
	a.addConsumers(g)
	return g
}

// Run starts the detector's parts in order (the ops listener, then one
// consumer per source), consumes until ctx ends or a part fails, then
// stops them in reverse order under cfg.ShutdownTimeout: the batch in hand
// is finished (or left uncommitted), the ban publisher flushed, Redis
// closed last. It returns the error of the part that failed, or nil. Run
// is called once.
func (a *App) Run(ctx context.Context) error {
	// For a ctx that ended before the group started its parts.
	defer func() { _ = a.closeRedis() }()
	defer func() { _ = a.closePublisher() }()
	return a.group.Run(ctx)
}

// Addr returns the address the ops listener (/metrics, /healthz, /readyz)
// is bound to, the port chosen for ":0" included, once Run has bound it;
// "" before. It is safe to call from any goroutine.
func (a *App) Addr() string {
	return a.ops.Address()
}
