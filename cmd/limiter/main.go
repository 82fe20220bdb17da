// Command limiter is the decision service gateways call on every request.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/gcfloor"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/telemetry"
	"github.com/ratewarden/ratewarden/internal/warmup"
)

// usage heads the limiter's -help; the variables follow it.
const usage = `Usage: limiter [help | rules check [FILE...]]

The decision service. The environment variables below configure it;
"limiter rules check" checks rules files (see limiter rules -h), and help
(also -h, -help) prints this text.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "rules" {
		os.Exit(rulesCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if config.Help(os.Args[1:], os.Stdout, config.LimiterProcess, usage) {
		return
	}
	gcfloor.Start(os.Getenv)
	lifecycle.Main("limiter", run)
}

// run wires the limiter's parts and runs them in order (package lifecycle):
// nothing listens before the warm-up has ended; at shutdown intake stops
// first, then rule and ban following, then the events are flushed and Redis
// is closed.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see limiter -help); "+
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

	// The clients that fail only on a bad configuration come first, before
	// the producer and the coalescer start their goroutines.
	redisstore.RouteLogs(log.Named("redis"))
	redisCfg := redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs,
		SentinelAddrs: cfg.RedisSentinelAddrs, SentinelMaster: cfg.RedisSentinelMaster, Timeout: cfg.RedisTimeout,
		PoolSize: cfg.RedisPipelines + 4} // one connection per pipeline, plus probes, heartbeats and ban sync
	rdb, err := redisstore.Connect(redisCfg)
	if err != nil {
		return err
	}
	banPublisher, err := kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic)
	if err != nil {
		return err
	}
	producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{
		Brokers:   cfg.KafkaBrokers,
		Topic:     cfg.DecisionsTopic,
		QueueSize: cfg.EventQueueSize,
		ClientID:  "ratewarden-limiter-" + cfg.Instance,
	}, log.Named("events"), reg)
	if err != nil {
		return err
	}
	store := redisstore.New(rdb) // before rdb's first command: see WarmUp
	decider := redisstore.NewCoalescer(store, redisstore.CoalesceConfig{
		Pipelines: cfg.RedisPipelines,
		Limit:     cfg.PipelineLimit,
		Window:    cfg.PipelineWindow,
		Wait:      cfg.PipelineWait,
		Timeout:   cfg.RedisTimeout,
		// The only breaker: each node's (see limiter.Config.BreakerOpen).
		NodeFailures: cfg.RedisBreakerFailures,
		Registerer:   reg,
	})

	// Bans: the whole blacklist at start and every BAN_RESYNC_INTERVAL,
	// changes as they happen in between; enforcement reads only memory.
	bans := limiter.NewBanSet(reg)
	blacklist := redisfleet.NewBlacklist(rdb, cfg.RedisKeyPrefix)
	banFollower := limiter.NewBanFollower(bans, blacklist, cfg.BanResync, log)
	// Heartbeats are the health checks: they prove Redis answers and count
	// the live limiters, the divisor of local limits while Redis is away.
	// They also carry the rule-set version each limiter runs.
	heartbeats := redisfleet.NewHeartbeats(rdb, cfg.RedisKeyPrefix, cfg.Instance, cfg.RedisHealthInterval)
	svc := limiter.New(limiter.Config{
		Instance:      cfg.Instance,
		ClassifyError: redisstore.ClassifyError,
		ErrorClasses:  redisstore.ErrorClasses(),
		Unreached:     redisstore.Unreached,
		Bans:          bans,
		Mode: limiter.ModeConfig{
			FailedChecks:    cfg.RedisFailedChecks,
			PermissiveAfter: cfg.PermissiveAfter,
			RecoverAfter:    cfg.RedisRecoverAfter,
		},
		BreakerOpen:         redisstore.BreakerOpen,
		PermissiveDenyRules: cfg.PermissiveDenyRules,
		OverLimitCacheSize:  cfg.OverLimitCache,
		LocalMaxKeys:        cfg.LocalMaxKeys,
		Health:              heartbeats,
		HealthInterval:      cfg.RedisHealthInterval,
		HealthTimeout:       cfg.RedisTimeout,
	}, nil, decider, producer, log, reg) // no rules until the manager's first load
	// Rules: the file merged with the dynamic rules, kept current by the
	// manager (SIGHUP, file and store polls, announcements on Redis).
	rulesMgr := rulesync.New(rulesync.Config{
		File:    cfg.RulesFile,
		RLSDir:  cfg.RLSConfigDir,
		Options: rules.Options{KeyPrefix: cfg.RedisKeyPrefix},
		Apply:   svc.SetRules,
		Connect: ruleStore(cfg),
		Changes: redisfleet.NewRuleChanges(rdb, cfg.RedisKeyPrefix),
		Report: func(version string, appliedAt time.Time) {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.RedisTimeout)
			defer cancel()
			_ = heartbeats.ReportRules(ctx, redisfleet.RulesReport{Version: version, AppliedAt: appliedAt}) // else the next beat reports it
		},
		FilePoll:   cfg.RulesPoll,
		StorePoll:  cfg.RulesPoll,
		Log:        log.Named("rules"),
		Registerer: reg,
	})

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
	// One gate for every decision transport (API_TOKENS), one for the
	// admin API (ADMIN_TOKEN).
	decisionGate := bearer.NewGate("decisions", "ratewarden", cfg.APITokens, log, reg)
	clients := clientaddr.Resolver{Trusted: cfg.TrustedProxies}
	// Envoy's rate limit API: the same engine, over gRPC and POST /json.
	rls := rlsapi.New(rlsapi.Config{
		AddressKey:      cfg.RLS.AddressKey,
		EndpointKey:     cfg.RLS.EndpointKey,
		ShadowMode:      cfg.RLS.ShadowMode,
		ResponseHeaders: cfg.RLS.ResponseHeaders,
		LimitHeader:     cfg.RLS.LimitHeader,
		RemainingHeader: cfg.RLS.RemainingHeader,
		ResetHeader:     cfg.RLS.ResetHeader,
		Gate:            decisionGate,
	}, svc, log.Named("rls"), reg)
	apiCfg := httpapi.Config{
		Service:        svc,
		Clients:        clients,
		AuthDenyStatus: cfg.AuthDenyStatus,
		Gate:           decisionGate,
		Log:            log,
		AnswerJSON:     rls.AnswerJSON, // POST /json, on fasthttp beside /v1/check
	}
	api := httpapi.NewHandler(apiCfg)
	if cfg.AdminToken != "" { // else the admin API does not exist (404)
		adminCfg := adminapi.Config{
			Gate:         bearer.NewGate("admin", "ratewarden admin", []string{cfg.AdminToken}, log, reg),
			Clients:      clients,
			Blacklist:    blacklist,
			BanPublisher: banPublisher,
			Bans:         bans,
			BanGrouping:  func() int { return svc.Rules().Detection().IPv6Prefix },
			Instances:    liveInstances(heartbeats),
			Instance:     cfg.Instance,
			Log:          log,
		}
		if cfg.DynamicRules {
			adminCfg.Rules = rulesMgr
		}
		api = adminapi.Beside(api, adminapi.New(adminCfg))
	}
	opsHandler := ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(reg),
		Probes:  probes,
		Details: func() map[string]string {
			d := map[string]string{"mode": string(svc.Mode())}
			if cfg.DynamicRules {
				d["dynamic_rules"] = dynamicRulesState(rulesMgr.View())
			}
			return d
		},
		Profiles: cfg.OpsListenAddr != "", // never on the decision port
		Log:      log,
	})
	// The decision port serves the operational routes too, unless they have
	// a port of their own: then only /healthz stays, for gateways' health
	// checks. POST /v1/check is served by fasthttp, the other routes by
	// net/http behind it (httpapi.NewFastHandler).
	rest := ops.Beside(api, opsHandler)
	var opsListener *ops.Listener
	if cfg.OpsListenAddr != "" {
		rest = ops.WithHealthz(api)
		opsListener = &ops.Listener{Var: "OPS_LISTEN_ADDR", Addr: cfg.OpsListenAddr, Log: log, Handler: opsHandler}
	}
	decisions := &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, TLS: cfg.TLS, Log: log, MaxConns: cfg.MaxConnections,
		Fast: httpapi.NewFastHandler(apiCfg, rest)}
	warnIfOpen(cfg, log)

	g := lifecycle.New(log, cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "redis", Stop: func(context.Context) error { return rdb.Close() }},
		lifecycle.Part{Name: "ban publisher", Stop: func(context.Context) error { return banPublisher.Close() }},
		lifecycle.Part{Name: "event producer", Stop: producer.Close}, // flushes the queued events
		lifecycle.Part{Name: "redis pipelines", Stop: func(context.Context) error { decider.Close(); return nil }},
		lifecycle.Part{Name: "ban following", Run: banFollower.Run},
		rulesPart(rulesMgr),
		// No listener opens before the warm-up has ended, so no decision is
		// the first round trip of a cold client (docs/operations.md, the warm-up). Not
		// fatal: past REDIS_WARMUP_TIMEOUT the limiter starts as it would
		// cold.
		lifecycle.Part{Name: "warm-up", Start: func(ctx context.Context) error {
			complete := warmup.Run(ctx, warmup.Config{
				Steps: []warmup.Step{
					{Name: "redis", Run: func(ctx context.Context) error { return store.WarmUp(ctx, redisCfg.PoolSize) }},
					{Name: "bans", Run: banFollower.Load},
				},
				Timeout:    cfg.RedisWarmup,
				Classify:   redisstore.ClassifyError,
				Log:        log.With(zap.String("redis", redisCfg.Target())),
				Registerer: reg,
			})
			if !complete && ctx.Err() == nil {
				// Redis did not answer for REDIS_WARMUP_TIMEOUT: down, not
				// slow, so the rules fall back from the first request.
				svc.RedisDown("warm-up incomplete")
			}
			return nil
		}},
		lifecycle.Part{Name: "redis health checks",
			Start: func(context.Context) error { svc.Start(); return nil },
			Stop: func(ctx context.Context) error {
				svc.Stop()
				leaveCtx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout)
				defer cancel()
				_ = heartbeats.Leave(leaveCtx) // else the others count this one for three more intervals
				return nil
			}},
	)
	if opsListener != nil { // opened first, closed last: metrics and probes outlast the drain
		g.Add(listenerPart("ops listener", opsListener))
	}
	g.Add(listenerPart("decision listener", decisions))
	var grpcListener *grpcPart
	if cfg.RLS.GRPCListenAddr != "" {
		grpcListener = &grpcPart{addr: cfg.RLS.GRPCListenAddr, maxConns: cfg.RLS.MaxConnections, rls: rls, server: rls.GRPCServer(rlsapi.ServerOptions{
			TLS:                   cfg.TLS,
			MaxConnectionAge:      cfg.RLS.MaxConnectionAge,
			MaxConnectionAgeGrace: cfg.RLS.MaxConnectionAgeGrace,
		})}
		g.Add(grpcListener.part())
	}
	if cfg.PprofAddr != "" {
		g.Add(listenerPart("profile listener", &ops.Listener{Var: "PPROF_ADDR", Addr: cfg.PprofAddr, Handler: ops.ProfileHandler(), Log: log}))
	}
	g.Add(lifecycle.Part{Name: "announce", Start: func(context.Context) error {
		opsAddr := ""
		if opsListener != nil {
			opsAddr = opsListener.Address()
		}
		grpcAddr := ""
		if grpcListener != nil {
			grpcAddr = grpcListener.address()
		}
		log.Info("limiter listening", zap.String("addr", decisions.Address()), zap.String("ops_addr", opsAddr),
			zap.String("grpc_addr", grpcAddr),
			zap.Bool("tls", cfg.TLS != nil), zap.Bool("client_certificates", cfg.TLSFiles.ClientCAFile != ""),
			zap.Bool("api_tokens", len(cfg.APITokens) > 0), zap.Int("rules", len(rulesMgr.View().Rules)),
			zap.String("rules_version", rulesMgr.View().Version), zap.String("redis", redisCfg.Target()),
			zap.Strings("kafka", cfg.KafkaBrokers), zap.String("instance", cfg.Instance))
		return nil
	}})
	return g.Run(ctx)
}
