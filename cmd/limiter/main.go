// Command limiter is the decision service gateways call on every request.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/gcfloor"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lease"
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
const usage = `Usage: limiter [help | version | rules check [FILE...]]

The decision service. The environment variables below configure it;
"limiter rules check" checks rules files (see limiter rules -h), version
(also -version) prints the build, and help (also -h, -help) prints this
text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "limiter") {
		return
	}
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
	log, err := telemetry.NewLogger(stderr, "limiter", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	uuid.EnableRandPool()
	w := &wiring{cfg: cfg, log: log, reg: telemetry.NewRegistry()}
	if err := w.connect(); err != nil {
		return err
	}
	w.decisionService()
	w.ruleManager()
	w.apis()
	w.listeners()
	warnIfOpen(cfg, log)
	return w.group().Run(ctx)
}

// wiring holds the limiter's parts while run builds them, each step from
// the ones before.
type wiring struct {
	cfg config.Limiter
	log *zap.Logger
	reg *prometheus.Registry

	redisCfg redisstore.ClientConfig
	rdb      redis.UniversalClient
	// control is a client of the same Redis for the round trips on no
	// request's path (health checks, the warm-up, ban sync), with
	// REDIS_CHECK_TIMEOUT: a Redis that answers late is slow, not down.
	control      redis.UniversalClient
	store        *redisstore.Store
	decider      *redisstore.Coalescer
	banPublisher *kafkabus.BanPublisher
	producer     *kafkabus.Producer // decisions
	outcomes     *kafkabus.Producer // outcome reports

	bans        *limiter.BanSet
	blacklist   *redisfleet.Blacklist
	banFollower *limiter.BanFollower
	heartbeats  *redisfleet.Heartbeats
	svc         *limiter.Service
	rulesMgr    *rulesync.Manager

	rls          *rlsapi.Server
	apiCfg       httpapi.Config
	api          http.Handler
	opsHandler   http.Handler
	opsListener  *ops.Listener // nil: the ops routes are on the decision port
	decisions    *ops.Listener
	grpcListener *grpcPart // nil: GRPC_LISTEN_ADDR off
}

// connect makes the clients. The ones that fail only on a bad
// configuration come first, before the producer and the coalescer start
// their goroutines.
func (w *wiring) connect() error {
	cfg := w.cfg
	redisstore.RouteLogs(w.log.Named("redis"))
	w.redisCfg = redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs,
		SentinelAddrs: cfg.RedisSentinelAddrs, SentinelMaster: cfg.RedisSentinelMaster, Timeout: cfg.RedisTimeout,
		// A decision round trip's context bounds its wait: its callers'
		// REDIS_TIMEOUT, its reply's REDIS_LATE_REPLY_WAIT more. Never
		// resent: a decision that ran is counted once.
		SocketTimeout: cfg.RedisTimeout + cfg.LateReplyWait, NoRetries: true,
		// One connection per pipeline, and per worker reading a late
		// reply (redisstore.LateWorkers), plus a few for the other callers.
		PoolSize: cfg.RedisPipelines*(1+redisstore.LateWorkers) + 4}
	var err error
	if w.rdb, err = redisstore.Connect(w.redisCfg); err != nil {
		return err
	}
	controlCfg := w.redisCfg
	controlCfg.Timeout, controlCfg.PoolSize = cfg.RedisCheckTimeout, 4
	if w.control, err = redisstore.Connect(controlCfg); err != nil {
		return err
	}
	if w.banPublisher, err = kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic); err != nil {
		return err
	}
	producer := func(topic, logName string) (*kafkabus.Producer, error) {
		return kafkabus.NewProducer(kafkabus.ProducerConfig{
			Brokers:   cfg.KafkaBrokers,
			Topic:     topic,
			QueueSize: cfg.EventQueueSize,
			ClientID:  "ratewarden-limiter-" + cfg.Instance,
		}, w.log.Named(logName), w.reg)
	}
	if w.producer, err = producer(cfg.DecisionsTopic, "events"); err != nil {
		return err
	}
	if w.outcomes, err = producer(cfg.OutcomesTopic, "outcomes"); err != nil {
		return err
	}
	w.store = redisstore.New(w.rdb) // before rdb's first command: see WarmUp
	w.decider = redisstore.NewCoalescer(w.store, redisstore.CoalesceConfig{
		Pipelines: cfg.RedisPipelines,
		Limit:     cfg.PipelineLimit,
		Window:    cfg.PipelineWindow,
		Wait:      cfg.PipelineWait,
		Timeout:   cfg.RedisTimeout,
		LateWait:  cfg.LateReplyWait,
		// The only breaker: each node's (see limiter.Backend.BreakerOpen).
		NodeFailures: cfg.RedisBreakerFailures,
		ProbeTimeout: cfg.RedisCheckTimeout,
		Registerer:   w.reg,
	})
	return nil
}

// decisionService makes the decision service and what it reads of the
// fleet: the bans (the whole blacklist at start and every
// BAN_RESYNC_INTERVAL, changes as they happen in between; enforcement reads
// only memory), the heartbeats, which are the health checks: they prove
// Redis answers, count the live limiters (the divisor of local limits while
// Redis is away) and carry the rule-set version each limiter runs, and the
// notices of leased keys found past their limit.
func (w *wiring) decisionService() {
	cfg := w.cfg
	w.bans = limiter.NewBanSet(w.reg)
	w.blacklist = redisfleet.NewBlacklist(w.control, cfg.RedisKeyPrefix)
	w.banFollower = limiter.NewBanFollower(w.bans, w.blacklist, cfg.BanResync, w.log)
	w.heartbeats = redisfleet.NewHeartbeats(w.control, cfg.RedisKeyPrefix, cfg.Instance, cfg.RedisHealthInterval)
	w.svc = limiter.New(limiter.Config{
		Instance: cfg.Instance,
		Bans:     w.bans,
		Outcomes: w.outcomes,
		Mode: limiter.ModeConfig{
			FailedChecks:    cfg.RedisFailedChecks,
			PermissiveAfter: cfg.PermissiveAfter,
			RecoverAfter:    cfg.RedisRecoverAfter,
		},
		PermissiveDenyRules: cfg.PermissiveDenyRules,
		OverLimitCacheSize:  cfg.OverLimitCache,
		LocalMaxKeys:        cfg.LocalMaxKeys,
		Lease:               lease.Config{Horizon: cfg.LeaseHorizon, MaxKeys: cfg.LeaseMaxKeys, Idle: cfg.LeaseIdle},
		LeaseNotices:        redisfleet.NewLeaseNotices(w.rdb, cfg.RedisKeyPrefix),
		Health:              w.heartbeats,
		HealthInterval:      cfg.RedisHealthInterval,
		HealthTimeout:       cfg.RedisCheckTimeout,
	}, nil, w.decider, w.producer, w.log, w.reg) // no rules until the manager's first load
	w.liveInstances()
}

// ruleManager makes the manager of the rules in force: the file merged with
// the RLS directory and the dynamic rules, kept current (SIGHUP, file and
// store polls, announcements on Redis).
func (w *wiring) ruleManager() {
	cfg := w.cfg
	w.rulesMgr = rulesync.New(rulesync.Config{
		File:       cfg.RulesFile,
		RLSDir:     cfg.RLSConfigDir,
		RLSFromXDS: cfg.ConfigType == config.ConfigXDS,
		Options:    rules.Options{KeyPrefix: cfg.RedisKeyPrefix, CaseSensitiveUserIDs: cfg.CaseSensitiveUserIDs},
		Apply:      w.applyRules,
		Connect:    ruleStore(cfg),
		Changes:    redisfleet.NewRuleChanges(w.rdb, cfg.RedisKeyPrefix),
		Report: func(version string, appliedAt time.Time) {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.RedisCheckTimeout)
			defer cancel()
			_ = w.heartbeats.ReportRules(ctx, redisfleet.RulesReport{Version: version, AppliedAt: appliedAt}) // else the next beat reports it
		},
		FilePoll:   cfg.RulesPoll,
		StorePoll:  cfg.RulesPoll,
		Log:        w.log.Named("rules"),
		Registerer: w.reg,
	})
}

// applyRules puts set in force: in the decision service, then in Envoy's
// rate limit API, whose metrics drop the rules set no longer has. The
// rules are first applied once the APIs exist (the manager starts later).
func (w *wiring) applyRules(set *rules.Set) {
	w.svc.SetRules(set)
	w.rls.RulesReplaced(set)
}

// apis makes the decision APIs (HTTP, Envoy's over gRPC and POST /json),
// behind one gate (API_TOKENS), the admin API behind its own (ADMIN_TOKEN),
// and the operational routes.
func (w *wiring) apis() {
	cfg := w.cfg
	decisionGate := bearer.NewGate("decisions", "ratewarden", cfg.APITokens, w.log, w.reg)
	clients := clientaddr.Resolver{Trusted: cfg.TrustedProxies}
	w.rls = rlsapi.New(rlsapi.Config{
		AddressKey:      cfg.RLS.AddressKey,
		EndpointKey:     cfg.RLS.EndpointKey,
		ShadowMode:      cfg.RLS.ShadowMode,
		ResponseHeaders: cfg.RLS.ResponseHeaders,
		LimitHeader:     cfg.RLS.LimitHeader,
		RemainingHeader: cfg.RLS.RemainingHeader,
		ResetHeader:     cfg.RLS.ResetHeader,
		Gate:            decisionGate,
	}, w.svc, w.log.Named("rls"), w.reg)
	w.apiCfg = httpapi.Config{
		Service:        w.svc,
		Clients:        clients,
		AuthDenyStatus: cfg.AuthDenyStatus,
		Gate:           decisionGate,
		Log:            w.log,
		AnswerJSON:     w.rls.AnswerJSON, // POST /json, on fasthttp beside /v1/check
	}
	w.api = httpapi.NewHandler(w.apiCfg)
	if cfg.AdminToken != "" { // else the admin API does not exist (404)
		w.api = adminapi.Beside(w.api, adminapi.New(w.adminConfig(clients)))
	}
	w.opsHandler = ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(w.reg),
		Probes:  w.probes(),
		Details: func() map[string]string {
			d := map[string]string{"mode": string(w.svc.Mode())}
			if cfg.DynamicRules {
				d["dynamic_rules"] = dynamicRulesState(w.rulesMgr.View())
			}
			return d
		},
		Profiles: cfg.OpsListenAddr != "", // never on the decision port
		Log:      w.log,
	})
}

// adminConfig is the admin API's: bans through the detector's path, and
// the dynamic rules when they are on.
func (w *wiring) adminConfig(clients clientaddr.Resolver) adminapi.Config {
	c := adminapi.Config{
		Gate:         bearer.NewGate("admin", "ratewarden admin", []string{w.cfg.AdminToken}, w.log, w.reg),
		Clients:      clients,
		Blacklist:    w.blacklist,
		BanPublisher: w.banPublisher,
		Bans:         w.bans,
		BanGrouping:  func() int { return w.svc.Rules().Detection().IPv6Prefix },
		UserKey:      func(id string) string { return w.svc.Rules().UserKey(id) },
		Instances:    liveInstances(w.heartbeats),
		Instance:     w.cfg.Instance,
		Log:          w.log,
	}
	if w.cfg.DynamicRules {
		c.Rules = w.rulesMgr
	}
	return c
}

// probes are what /readyz reports. None is required: without Redis the
// limiter still decides (its mode says how), without Postgres the rules in
// force stay (only changes wait), so it must stay in the load balancer.
func (w *wiring) probes() []ops.Probe {
	probes := []ops.Probe{
		{Name: "redis", Check: func(ctx context.Context) error { return w.control.Ping(ctx).Err() }},
		{Name: "kafka", Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, w.cfg.KafkaBrokers) }},
	}
	if w.cfg.DynamicRules { // the rule store's last answer, no I/O
		probes = append(probes, ops.Probe{Name: "postgres", Check: func(context.Context) error { return w.rulesMgr.StoreError() }})
	}
	return probes
}

// listeners makes the listeners. The decision port serves the operational
// routes too, unless they have a port of their own: then only /healthz
// stays, for gateways' health checks. POST /v1/check is served by
// fasthttp, the other routes by net/http behind it
// (httpapi.NewFastHandler).
func (w *wiring) listeners() {
	cfg := w.cfg
	rest := ops.Beside(w.api, w.opsHandler)
	if cfg.OpsListenAddr != "" {
		rest = ops.WithHealthz(w.api)
		w.opsListener = &ops.Listener{Var: "OPS_LISTEN_ADDR", Addr: cfg.OpsListenAddr, Log: w.log, Handler: w.opsHandler}
	}
	w.decisions = &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, TLS: cfg.TLS, Log: w.log, MaxConns: cfg.MaxConnections,
		Fast: httpapi.NewFastHandler(w.apiCfg, rest)}
	if cfg.RLS.GRPCListenAddr != "" {
		w.grpcListener = &grpcPart{addr: cfg.RLS.GRPCListenAddr, maxConns: cfg.RLS.MaxConnections, rls: w.rls,
			server: w.rls.GRPCServer(rlsapi.ServerOptions{
				TLS:                   cfg.TLS,
				MaxConnectionAge:      cfg.RLS.MaxConnectionAge,
				MaxConnectionAgeGrace: cfg.RLS.MaxConnectionAgeGrace,
			})}
	}
}

// group orders the parts: started in this order, stopped in reverse.
func (w *wiring) group() *lifecycle.Group {
	g := lifecycle.New(w.log, w.cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "redis", Stop: func(context.Context) error { return errors.Join(w.rdb.Close(), w.control.Close()) }},
		lifecycle.Part{Name: "ban publisher", Stop: func(context.Context) error { return w.banPublisher.Close() }},
		lifecycle.Part{Name: "event producer", Stop: w.producer.Close}, // flushes the queued events
		lifecycle.Part{Name: "outcome producer", Stop: w.outcomes.Close},
		lifecycle.Part{Name: "redis pipelines", Stop: func(context.Context) error { w.decider.Close(); return nil }},
		lifecycle.Part{Name: "ban following", Run: w.banFollower.Run},
		rulesPart(w.rulesMgr),
	)
	if w.cfg.ConfigType == config.ConfigXDS {
		g.Add(xdsPart(w.cfg.XDS, w.rulesMgr, w.log.Named("xds"), w.reg))
	}
	g.Add(
		w.warmUpPart(),
		w.healthPart(),
	)
	if w.opsListener != nil { // opened first, closed last: metrics and probes outlast the drain
		g.Add(listenerPart("ops listener", w.opsListener))
	}
	g.Add(listenerPart("decision listener", w.decisions))
	if w.grpcListener != nil {
		g.Add(w.grpcListener.part())
	}
	if w.cfg.PprofAddr != "" {
		g.Add(listenerPart("profile listener", &ops.Listener{Var: "PPROF_ADDR", Addr: w.cfg.PprofAddr, Handler: ops.ProfileHandler(), Log: w.log}))
	}
	g.Add(lifecycle.Part{Name: "announce", Start: func(context.Context) error { w.announce(); return nil }})
	return g
}

// warmUpPart warms the Redis clients and loads the bans before any
// listener opens, so no decision is the first round trip of a cold client
// (docs/operations.md, the warm-up). Not fatal: past REDIS_WARMUP_TIMEOUT
// the limiter starts without, in local mode.
func (w *wiring) warmUpPart() lifecycle.Part {
	return lifecycle.Part{Name: "warm-up", Start: func(ctx context.Context) error {
		complete := warmup.Run(ctx, warmup.Config{
			Steps: []warmup.Step{
				{Name: "redis", Run: func(ctx context.Context) error { return w.store.WarmUpThrough(ctx, w.control, w.redisCfg.PoolSize) }},
				{Name: "bans", Run: w.banFollower.Load},
				{Name: "live instances", Run: w.readLastCount},
			},
			Timeout:    w.cfg.RedisWarmup,
			Classify:   redisstore.ClassifyError,
			Log:        w.log.With(zap.String("redis", w.redisCfg.Target())),
			Registerer: w.reg,
		})
		if !complete && ctx.Err() == nil {
			// Redis did not answer for REDIS_WARMUP_TIMEOUT: down, not
			// slow, so the rules fall back from the first request.
			w.svc.RedisDown("warm-up incomplete")
		}
		return nil
	}}
}

// healthPart runs the health checks (heartbeats) and the lease renewer; at
// shutdown the limiter gives its leases back, while the Redis pipelines are
// still open, and leaves the heartbeats, else the others count it for three
// more intervals.
func (w *wiring) healthPart() lifecycle.Part {
	return lifecycle.Part{Name: "redis health checks and leases",
		Start: func(context.Context) error { w.svc.Start(); return nil },
		Stop: func(ctx context.Context) error {
			w.svc.Stop()
			leaveCtx, cancel := context.WithTimeout(ctx, w.cfg.RedisCheckTimeout)
			defer cancel()
			_ = w.heartbeats.Leave(leaveCtx)
			return nil
		}}
}

// announce logs that the limiter listens, with what it runs.
func (w *wiring) announce() {
	cfg := w.cfg
	opsAddr, grpcAddr := "", ""
	if w.opsListener != nil {
		opsAddr = w.opsListener.Address()
	}
	if w.grpcListener != nil {
		grpcAddr = w.grpcListener.address()
	}
	view := w.rulesMgr.View()
	w.log.Info("limiter listening", zap.String("addr", w.decisions.Address()), zap.String("ops_addr", opsAddr),
		zap.String("grpc_addr", grpcAddr),
		zap.Bool("tls", cfg.TLS != nil), zap.Bool("client_certificates", cfg.TLSFiles.ClientCAFile != ""),
		zap.Bool("api_tokens", len(cfg.APITokens) > 0), zap.Int("rules", len(view.Rules)),
		zap.String("rules_version", view.Version), zap.String("redis", w.redisCfg.Target()),
		zap.Strings("kafka", cfg.KafkaBrokers), zap.String("instance", cfg.Instance),
		zap.Bool("user_ids_case_sensitive", cfg.CaseSensitiveUserIDs))
}
