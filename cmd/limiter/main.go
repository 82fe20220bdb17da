// Command limiter is the decision service gateways call on every request.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/telemetry"
	"github.com/ratewarden/ratewarden/internal/warmup"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "rules" {
		os.Exit(rulesCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "limiter:", err)
		os.Exit(1)
	}
}

// run wires the service and serves until ctx is cancelled, then shuts down
// in reverse start order: stop intake, flush events, close Redis.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see README); "+
			"the only subcommand is \"rules check FILE...\"", args)
	}
	cfg, err := config.LoadLimiter(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	uuid.EnableRandPool()
	reg := telemetry.NewRegistry()

	redisstore.RouteLogs(log.Named("redis"))
	redisCfg := redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs,
		SentinelAddrs: cfg.RedisSentinelAddrs, SentinelMaster: cfg.RedisSentinelMaster, Timeout: cfg.RedisTimeout,
		PoolSize: cfg.RedisPipelines + 4} // one connection per pipeline, plus probes, heartbeats and ban sync
	rdb, err := redisstore.Connect(redisCfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	store := redisstore.New(rdb) // before rdb's first command: see WarmUp

	counter := redisstore.NewCoalescer(store, redisstore.CoalesceConfig{
		Pipelines:  cfg.RedisPipelines,
		Limit:      cfg.PipelineLimit,
		Window:     cfg.PipelineWindow,
		Timeout:    cfg.RedisTimeout,
		Registerer: reg,
	})

	producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{
		Brokers:   cfg.KafkaBrokers,
		Topic:     cfg.DecisionsTopic,
		QueueSize: cfg.EventQueueSize,
		ClientID:  "ratewarden-limiter-" + cfg.Instance,
	}, log.Named("events"), reg)
	if err != nil {
		return err
	}

	banPublisher, err := kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic)
	if err != nil {
		return err
	}
	defer banPublisher.Close()

	// Bans: the whole blacklist now and every BAN_RESYNC_INTERVAL, changes as
	// they happen in between; enforcement reads only memory.
	bans := limiter.NewBanSet(reg)
	blacklist := redisstore.NewBlacklist(rdb, cfg.RedisKeyPrefix)
	banFollower := limiter.NewBanFollower(bans, blacklist, cfg.BanResync, log)
	banCtx, stopBans := context.WithCancel(context.WithoutCancel(ctx))
	var banSync sync.WaitGroup
	banSync.Go(func() { _ = banFollower.Run(banCtx) })
	defer func() { stopBans(); banSync.Wait() }()

	// Heartbeats are the health checks: they prove Redis answers and count
	// the live limiters, the divisor of local limits while Redis is away.
	// They also carry the rule-set version each limiter runs.
	heartbeats := redisstore.NewHeartbeats(rdb, cfg.RedisKeyPrefix, cfg.Instance, cfg.RedisHealthInterval)

	// Rules: the file merged with the dynamic rules, kept current by the
	// manager (SIGHUP, file and store polls, announcements on Redis).
	var svc *limiter.Service // nil while the manager's Start applies the first set
	rulesMgr := rulesync.New(rulesync.Config{
		File:    cfg.RulesFile,
		Options: rules.Options{KeyPrefix: cfg.RedisKeyPrefix},
		Apply: func(set *rules.Set) {
			if svc != nil {
				svc.SetRules(set)
			}
		},
		Connect: ruleStore(cfg),
		Changes: redisstore.NewRuleChanges(rdb, cfg.RedisKeyPrefix),
		Report: func(version string, appliedAt time.Time) {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.RedisTimeout)
			defer cancel()
			_ = heartbeats.ReportRules(ctx, redisstore.RulesReport{Version: version, AppliedAt: appliedAt}) // else the next beat reports it
		},
		FilePoll:   cfg.RulesPoll,
		StorePoll:  cfg.RulesPoll,
		Log:        log.Named("rules"),
		Registerer: reg,
	})
	if err := rulesMgr.Start(ctx); err != nil {
		return err
	}
	svc = limiter.New(limiter.Config{
		Instance:      cfg.Instance,
		ClassifyError: redisstore.ClassifyError,
		ErrorClasses:  redisstore.ErrorClasses(),
		Bans:          bans,
		Mode: limiter.ModeConfig{
			FailedChecks:    cfg.RedisFailedChecks,
			PermissiveAfter: cfg.PermissiveAfter,
			RecoverAfter:    cfg.RedisRecoverAfter,
		},
		BreakerFailures:     cfg.RedisBreakerFailures,
		PermissiveDenyRules: cfg.PermissiveDenyRules,
		OverLimitCacheSize:  cfg.OverLimitCache,
		LocalMaxKeys:        cfg.LocalMaxKeys,
		Health:              heartbeats,
		HealthInterval:      cfg.RedisHealthInterval,
		HealthTimeout:       cfg.RedisTimeout,
	}, rulesMgr.View().Set, counter, producer, log, reg)

	// No listener opens before the warm-up has ended, so no decision is the
	// first round trip of a cold client (README "Operations"). Not fatal:
	// past REDIS_WARMUP_TIMEOUT the limiter starts as it would cold.
	warmup.Run(ctx, warmup.Config{
		Steps: []warmup.Step{
			{Name: "redis", Run: func(ctx context.Context) error { return store.WarmUp(ctx, redisCfg.PoolSize) }},
			{Name: "bans", Run: banFollower.Load},
		},
		Timeout:    cfg.RedisWarmup,
		Classify:   redisstore.ClassifyError,
		Log:        log.With(zap.String("redis", redisCfg.Target())),
		Registerer: reg,
	})
	svc.Start()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	rulesCtx, stopRules := context.WithCancel(context.WithoutCancel(ctx))
	var rulesSync sync.WaitGroup
	rulesSync.Go(func() { rulesMgr.Run(rulesCtx, hup) })
	defer func() { signal.Stop(hup); stopRules(); rulesSync.Wait() }()
	defer func() {
		svc.Stop()
		leaveCtx, cancel := context.WithTimeout(context.Background(), cfg.RedisTimeout)
		_ = heartbeats.Leave(leaveCtx) // else the others count this one for three more intervals
		cancel()
	}()

	// None is required: without Redis the limiter still decides (its mode
	// says how), without Postgres the rules in force stay (only changes
	// wait), so it must stay in the load balancer.
	probes := []ops.Probe{
		{Name: "redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		{Name: "kafka", Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
	}
	if cfg.DynamicRules { // the rule store's last answer, no I/O
		probes = append(probes, ops.Probe{Name: "postgres", Check: func(context.Context) error { return rulesMgr.StoreError() }})
	}
	api := httpapi.NewHandler(httpapi.Config{
		Service:        svc,
		TrustedProxies: cfg.TrustedProxies,
		AuthDenyStatus: cfg.AuthDenyStatus,
		Log:            log,
		AdminToken:     cfg.AdminToken,
		Blacklist:      blacklist,
		BanPublisher:   banPublisher,
		Bans:           bans,
		Rules:          rulesMgr,
		Instances:      liveInstances(heartbeats),
		Instance:       cfg.Instance,
	})
	handler := ops.Beside(api, ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(reg),
		Probes:  probes,
		Details: func() map[string]string { return map[string]string{"mode": svc.Mode()} },
		Log:     log,
	}))
	srv := ops.NewServer(handler, log)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("LISTEN_ADDR %s: %w", cfg.ListenAddr, err)
	}
	log.Info("limiter listening", zap.String("addr", ln.Addr().String()), zap.Int("rules", len(rulesMgr.View().Rules)), zap.String("rules_version", rulesMgr.View().Version),
		zap.String("redis", redisCfg.Target()), zap.Strings("kafka", cfg.KafkaBrokers), zap.String("instance", cfg.Instance))

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if cfg.PprofAddr != "" {
		stopProfiles, err := serveProfiles(cfg.PprofAddr, log)
		if err != nil {
			_ = srv.Close()
			return err
		}
		defer stopProfiles()
	}
	select {
	case err = <-served:
		err = fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		log.Warn("http shutdown", zap.Error(serr))
	}
	counter.Close()
	if perr := producer.Close(shutdownCtx); perr != nil {
		log.Warn("event flush incomplete", zap.Error(perr))
	}
	log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ruleStore opens the dynamic rule store, creating the database and schema
// if need be (as the archiver does; migrations take a lock), or returns nil
// when DYNAMIC_RULES is off.
func ruleStore(cfg config.Limiter) func(context.Context) (rulesync.Store, error) {
	if !cfg.DynamicRules {
		return nil
	}
	return func(ctx context.Context) (rulesync.Store, error) {
		if err := pgstore.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
		store, err := pgstore.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		if err := store.Migrate(ctx); err != nil {
			store.Close()
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		return store, nil
	}
}

// serveProfiles serves the pprof endpoints on addr until the returned
// function is called.
func serveProfiles(addr string, log *zap.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("PPROF_ADDR %s: %w", addr, err)
	}
	// No write timeout: a CPU profile or trace streams for its whole duration.
	srv := &http.Server{Handler: ops.ProfileHandler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: zap.NewStdLog(log.Named("pprof"))}
	go func() { _ = srv.Serve(ln) }()
	log.Info("profiles served", zap.String("addr", ln.Addr().String()))
	return func() { _ = srv.Close() }, nil
}

// liveInstances lists the live limiters for the admin API.
func liveInstances(hb *redisstore.Heartbeats) func(context.Context, time.Time) ([]httpapi.LiveInstance, error) {
	return func(ctx context.Context, now time.Time) ([]httpapi.LiveInstance, error) {
		list, err := hb.Instances(ctx, now)
		out := make([]httpapi.LiveInstance, len(list))
		for i, in := range list {
			out[i] = httpapi.LiveInstance{ID: in.ID, LastSeen: in.LastSeen, RulesVersion: in.Rules.Version, RulesAppliedAt: in.Rules.AppliedAt}
		}
		return out, err
	}
}
