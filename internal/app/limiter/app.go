// Package limiter assembles the decision service: the Redis clients and
// the decision engine, the event and outcome producers, the bans and
// heartbeats it follows, the rules in force (file, RLS directory or xDS,
// dynamic store), the decision APIs (HTTP, Envoy's over gRPC, POST /json),
// the admin API and the operational routes, started in order and stopped
// in reverse. cmd/limiter reads the environment and handles signals; this
// package is everything else, so a test can run several limiters in one
// process.
package limiter

import (
	"context"
	"errors"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/config"
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

// Deps are what the limiter takes from its host rather than from its
// configuration.
type Deps struct {
	// Log is the limiter's logger; required.
	Log *zap.Logger
	// Registry holds the limiter's metrics and is what /metrics serves;
	// required. A process uses telemetry.NewRegistry, a test a registry
	// of its own per limiter.
	Registry *prometheus.Registry
	// Reload delivers the signals (SIGHUP) on which the rules file and the
	// RLS directory are read again at once, besides every
	// RULES_POLL_INTERVAL. Nil: none.
	Reload <-chan os.Signal
}

// Addrs are the addresses the limiter's listeners are bound to, the ports
// chosen for ":0" included; "" for a listener that is off.
type Addrs struct {
	// Decisions is LISTEN_ADDR's: the HTTP decision API, POST /json, the
	// admin API, and the operational routes unless Ops is set.
	Decisions string
	// Ops is OPS_LISTEN_ADDR's: /metrics, /healthz, /readyz, profiles.
	Ops string
	// GRPC is GRPC_LISTEN_ADDR's: Envoy's rate limit service.
	GRPC string
}

// New connects the clients and assembles the limiter; nothing is
// decided, followed or served before Run. Once New has returned an App,
// Run must be called to release its clients, even with a context already
// ended.
func New(cfg config.Limiter, deps Deps) (*App, error) {
	if deps.Log == nil || deps.Registry == nil {
		return nil, errors.New("limiter: a logger and a registry are required")
	}
	a := &App{cfg: cfg, log: deps.Log, reg: deps.Registry, reload: deps.Reload}
	if err := a.connect(); err != nil {
		_ = a.closeClients(context.Background()) // nothing is queued yet
		return nil, err
	}
	a.decisionService()
	a.ruleManager()
	a.apis()
	a.listeners()
	a.group = a.parts()
	return a, nil
}

// Run starts the limiter's parts in order (nothing listens before the
// warm-up has ended), serves until ctx ends or a part fails, then stops
// them in reverse order under SHUTDOWN_TIMEOUT: intake first, then rule
// and ban following, then the events are flushed and Redis is closed. It
// returns the error of the part that failed, or nil. Run is called once.
func (a *App) Run(ctx context.Context) error {
	warnIfOpen(a.cfg, a.log)
	err := a.group.Run(ctx)
	// For a ctx that ended before the group started its parts: nothing
	// was decided, so nothing is queued.
	_ = a.closeClients(context.Background())
	return err
}

// Addrs returns the bound addresses once Run has opened every listener;
// the zero Addrs before. It is safe to call from any goroutine.
func (a *App) Addrs() Addrs {
	if p := a.addrs.Load(); p != nil {
		return *p
	}
	return Addrs{}
}

// App is one limiter, from New to the end of Run; New builds its parts,
// each step from the ones before.
type App struct {
	cfg    config.Limiter
	log    *zap.Logger
	reg    *prometheus.Registry
	reload <-chan os.Signal

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
	closeOnce    sync.Once

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

	group *lifecycle.Group
	addrs atomic.Pointer[Addrs]
}

// connect makes the clients. The ones that fail only on a bad
// configuration come first, before the producer and the coalescer start
// their goroutines.
func (a *App) connect() error {
	cfg := a.cfg
	a.redisCfg = redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs,
		SentinelAddrs: cfg.RedisSentinelAddrs, SentinelMaster: cfg.RedisSentinelMaster, Timeout: cfg.RedisTimeout,
		// A decision round trip's context bounds its wait: its callers'
		// REDIS_TIMEOUT, its reply's REDIS_LATE_REPLY_WAIT more. Never
		// resent: a decision that ran is counted once.
		SocketTimeout: cfg.RedisTimeout + cfg.LateReplyWait, NoRetries: true,
		// One connection per pipeline, and per worker reading a late
		// reply (redisstore.LateWorkers), plus a few for the other callers.
		PoolSize: cfg.RedisPipelines*(1+redisstore.LateWorkers) + 4}
	var err error
	if a.rdb, err = redisstore.Connect(a.redisCfg); err != nil {
		return err
	}
	controlCfg := a.redisCfg
	controlCfg.Timeout, controlCfg.PoolSize = cfg.RedisCheckTimeout, 4
	if a.control, err = redisstore.Connect(controlCfg); err != nil {
		return err
	}
	if a.banPublisher, err = kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic); err != nil {
		return err
	}
	producer := func(topic, logName string) (*kafkabus.Producer, error) {
		return kafkabus.NewProducer(kafkabus.ProducerConfig{
			Brokers:   cfg.KafkaBrokers,
			Topic:     topic,
			QueueSize: cfg.EventQueueSize,
			ClientID:  "ratewarden-limiter-" + cfg.Instance,
		}, a.log.Named(logName), a.reg)
	}
	if a.producer, err = producer(cfg.DecisionsTopic, "events"); err != nil {
		return err
	}
	if a.outcomes, err = producer(cfg.OutcomesTopic, "outcomes"); err != nil {
		return err
	}
	a.store = redisstore.New(a.rdb) // before rdb's first command: see WarmUp
	a.decider = redisstore.NewCoalescer(a.store, redisstore.CoalesceConfig{
		Pipelines: cfg.RedisPipelines,
		Limit:     cfg.PipelineLimit,
		Window:    cfg.PipelineWindow,
		Wait:      cfg.PipelineWait,
		Timeout:   cfg.RedisTimeout,
		LateWait:  cfg.LateReplyWait,
		// The only breaker: each node's (see limiter.Backend.BreakerOpen).
		NodeFailures: cfg.RedisBreakerFailures,
		ProbeTimeout: cfg.RedisCheckTimeout,
		Registerer:   a.reg,
	})
	return nil
}

// closeClients closes the clients connect opened, once, in the reverse
// order of their use: the Redis pipelines, then the producers (flushing the
// queued events and outcomes within ctx), the ban publisher, and Redis
// last. It is the first part's Stop, and Run's last step when the group
// never started.
func (a *App) closeClients(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		if a.decider != nil {
			a.decider.Close()
		}
		var errs []error
		for _, p := range []*kafkabus.Producer{a.outcomes, a.producer} {
			if p != nil {
				errs = append(errs, p.Close(ctx))
			}
		}
		if a.banPublisher != nil {
			errs = append(errs, a.banPublisher.Close())
		}
		for _, c := range []redis.UniversalClient{a.control, a.rdb} {
			if c != nil {
				errs = append(errs, c.Close())
			}
		}
		err = errors.Join(errs...)
	})
	return err
}

// decisionService makes the decision service and what it reads of the
// fleet: the bans (the whole blacklist at start and every
// BAN_RESYNC_INTERVAL, changes as they happen in between; enforcement reads
// only memory), the heartbeats, which are the health checks: they prove
// Redis answers, count the live limiters (the divisor of local limits while
// Redis is away) and carry the rule-set version each limiter runs, and the
// notices of leased keys found past their limit.
func (a *App) decisionService() {
	cfg := a.cfg
	a.bans = limiter.NewBanSet(a.reg)
	a.blacklist = redisfleet.NewBlacklist(a.control, cfg.RedisKeyPrefix)
	a.banFollower = limiter.NewBanFollower(a.bans, a.blacklist, cfg.BanResync, a.log)
	a.heartbeats = redisfleet.NewHeartbeats(a.control, cfg.RedisKeyPrefix, cfg.Instance, cfg.RedisHealthInterval)
	a.svc = limiter.New(limiter.Config{
		Instance: cfg.Instance,
		Bans:     a.bans,
		Outcomes: a.outcomes,
		Mode: limiter.ModeConfig{
			FailedChecks:    cfg.RedisFailedChecks,
			PermissiveAfter: cfg.PermissiveAfter,
			RecoverAfter:    cfg.RedisRecoverAfter,
		},
		PermissiveDenyRules: cfg.PermissiveDenyRules,
		OverLimitCacheSize:  cfg.OverLimitCache,
		LocalMaxKeys:        cfg.LocalMaxKeys,
		Lease:               lease.Config{Horizon: cfg.LeaseHorizon, MaxKeys: cfg.LeaseMaxKeys, Idle: cfg.LeaseIdle},
		LeaseNotices:        redisfleet.NewLeaseNotices(a.rdb, cfg.RedisKeyPrefix),
		Health:              a.heartbeats,
		HealthInterval:      cfg.RedisHealthInterval,
		HealthTimeout:       cfg.RedisCheckTimeout,
	}, nil, a.decider, a.producer, a.log, a.reg) // no rules until the manager's first load
	a.liveInstances()
}

// ruleManager makes the manager of the rules in force: the file merged with
// the RLS directory and the dynamic rules, kept current (SIGHUP, file and
// store polls, announcements on Redis).
func (a *App) ruleManager() {
	cfg := a.cfg
	a.rulesMgr = rulesync.New(rulesync.Config{
		File:       cfg.RulesFile,
		RLSDir:     cfg.RLSConfigDir,
		RLSFromXDS: cfg.ConfigType == config.ConfigXDS,
		Options:    rules.Options{KeyPrefix: cfg.RedisKeyPrefix, CaseSensitiveUserIDs: cfg.CaseSensitiveUserIDs},
		Apply:      a.applyRules,
		Connect:    ruleStore(cfg),
		Changes:    redisfleet.NewRuleChanges(a.rdb, cfg.RedisKeyPrefix),
		Report: func(version string, appliedAt time.Time) {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.RedisCheckTimeout)
			defer cancel()
			_ = a.heartbeats.ReportRules(ctx, redisfleet.RulesReport{Version: version, AppliedAt: appliedAt}) // else the next beat reports it
		},
		FilePoll:   cfg.RulesPoll,
		StorePoll:  cfg.RulesPoll,
		Log:        a.log.Named("rules"),
		Registerer: a.reg,
	})
}

// applyRules puts set in force: in the decision service, then in Envoy's
// rate limit API, whose metrics drop the rules set no longer has. The
// rules are first applied once the APIs exist (the manager starts later).
func (a *App) applyRules(set *rules.Set) {
	a.svc.SetRules(set)
	a.rls.RulesReplaced(set)
}

// apis makes the decision APIs (HTTP, Envoy's over gRPC and POST /json),
// behind one gate (API_TOKENS), the admin API behind its own (ADMIN_TOKEN),
// and the operational routes.
func (a *App) apis() {
	cfg := a.cfg
	decisionGate := bearer.NewGate("decisions", "ratewarden", cfg.APITokens, a.log, a.reg)
	clients := clientaddr.Resolver{Trusted: cfg.TrustedProxies}
	a.rls = rlsapi.New(rlsapi.Config{
		AddressKey:      cfg.RLS.AddressKey,
		EndpointKey:     cfg.RLS.EndpointKey,
		ShadowMode:      cfg.RLS.ShadowMode,
		ResponseHeaders: cfg.RLS.ResponseHeaders,
		LimitHeader:     cfg.RLS.LimitHeader,
		RemainingHeader: cfg.RLS.RemainingHeader,
		ResetHeader:     cfg.RLS.ResetHeader,
		Gate:            decisionGate,
	}, a.svc, a.log.Named("rls"), a.reg)
	a.apiCfg = httpapi.Config{
		Service:        a.svc,
		Clients:        clients,
		AuthDenyStatus: cfg.AuthDenyStatus,
		Gate:           decisionGate,
		Log:            a.log,
		AnswerJSON:     a.rls.AnswerJSON, // POST /json, on fasthttp beside /v1/check
	}
	a.api = httpapi.NewHandler(a.apiCfg)
	if cfg.AdminToken != "" { // else the admin API does not exist (404)
		a.api = adminapi.Beside(a.api, adminapi.New(a.adminConfig(clients)))
	}
	a.opsHandler = ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(a.reg),
		Probes:  a.probes(),
		Details: func() map[string]string {
			d := map[string]string{"mode": string(a.svc.Mode())}
			if cfg.DynamicRules {
				d["dynamic_rules"] = dynamicRulesState(a.rulesMgr.View())
			}
			return d
		},
		Profiles: cfg.OpsListenAddr != "", // never on the decision port
		Log:      a.log,
	})
}

// adminConfig is the admin API's: bans through the detector's path, and
// the dynamic rules when they are on.
func (a *App) adminConfig(clients clientaddr.Resolver) adminapi.Config {
	c := adminapi.Config{
		Gate:         bearer.NewGate("admin", "ratewarden admin", []string{a.cfg.AdminToken}, a.log, a.reg),
		Clients:      clients,
		Blacklist:    a.blacklist,
		BanPublisher: a.banPublisher,
		Bans:         a.bans,
		BanGrouping:  func() int { return a.svc.Rules().Detection().IPv6Prefix },
		UserKey:      func(id string) string { return a.svc.Rules().UserKey(id) },
		Instances:    liveInstances(a.heartbeats),
		Instance:     a.cfg.Instance,
		Log:          a.log,
	}
	if a.cfg.DynamicRules {
		c.Rules = a.rulesMgr
	}
	return c
}

// probes are what /readyz reports. None is required: without Redis the
// limiter still decides (its mode says how), without Postgres the rules in
// force stay (only changes wait), so it must stay in the load balancer.
func (a *App) probes() []ops.Probe {
	probes := []ops.Probe{
		{Name: "redis", Check: func(ctx context.Context) error { return a.control.Ping(ctx).Err() }},
		{Name: "kafka", Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, a.cfg.KafkaBrokers) }},
	}
	if a.cfg.DynamicRules { // the rule store's last answer, no I/O
		probes = append(probes, ops.Probe{Name: "postgres", Check: func(context.Context) error { return a.rulesMgr.StoreError() }})
	}
	return probes
}

// listeners makes the listeners. The decision port serves the operational
// routes too, unless they have a port of their own: then only /healthz
// stays, for gateways' health checks. POST /v1/check is served by
// fasthttp, the other routes by net/http behind it
// (httpapi.NewFastHandler).
func (a *App) listeners() {
	cfg := a.cfg
	rest := ops.Beside(a.api, a.opsHandler)
	if cfg.OpsListenAddr != "" {
		rest = ops.WithHealthz(a.api)
		a.opsListener = &ops.Listener{Var: "OPS_LISTEN_ADDR", Addr: cfg.OpsListenAddr, Log: a.log, Handler: a.opsHandler}
	}
	a.decisions = &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, TLS: cfg.TLS, Log: a.log, MaxConns: cfg.MaxConnections,
		Fast: httpapi.NewFastHandler(a.apiCfg, rest)}
	if cfg.RLS.GRPCListenAddr != "" {
		a.grpcListener = &grpcPart{addr: cfg.RLS.GRPCListenAddr, maxConns: cfg.RLS.MaxConnections, rls: a.rls,
			server: a.rls.GRPCServer(rlsapi.ServerOptions{
				TLS:                   cfg.TLS,
				MaxConnectionAge:      cfg.RLS.MaxConnectionAge,
				MaxConnectionAgeGrace: cfg.RLS.MaxConnectionAgeGrace,
			})}
	}
}

// parts orders the parts: started in this order, stopped in reverse.
func (a *App) parts() *lifecycle.Group {
	g := lifecycle.New(a.log, a.cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "clients", Stop: a.closeClients},
		lifecycle.Part{Name: "ban following", Run: a.banFollower.Run},
		rulesPart(a.rulesMgr, a.reload),
	)
	if a.cfg.ConfigType == config.ConfigXDS {
		g.Add(xdsPart(a.cfg.XDS, a.rulesMgr, a.log.Named("xds"), a.reg))
	}
	g.Add(
		a.warmUpPart(),
		a.healthPart(),
	)
	if a.opsListener != nil { // opened first, closed last: metrics and probes outlast the drain
		g.Add(listenerPart("ops listener", a.opsListener))
	}
	g.Add(listenerPart("decision listener", a.decisions))
	if a.grpcListener != nil {
		g.Add(a.grpcListener.part())
	}
	if a.cfg.PprofAddr != "" {
		g.Add(listenerPart("profile listener", &ops.Listener{Var: "PPROF_ADDR", Addr: a.cfg.PprofAddr, Handler: ops.ProfileHandler(), Log: a.log}))
	}
	g.Add(lifecycle.Part{Name: "announce", Start: func(context.Context) error { a.announce(); return nil }})
	return g
}

// warmUpPart warms the Redis clients and loads the bans before any
// listener opens, so no decision is the first round trip of a cold client
// (docs/operations.md, the warm-up). Not fatal: past REDIS_WARMUP_TIMEOUT
// the limiter starts without, in local mode.
func (a *App) warmUpPart() lifecycle.Part {
	return lifecycle.Part{Name: "warm-up", Start: func(ctx context.Context) error {
		complete := warmup.Run(ctx, warmup.Config{
			Steps: []warmup.Step{
				{Name: "redis", Run: func(ctx context.Context) error { return a.store.WarmUpThrough(ctx, a.control, a.redisCfg.PoolSize) }},
				{Name: "bans", Run: a.banFollower.Load},
				{Name: "live instances", Run: a.readLastCount},
			},
			Timeout:    a.cfg.RedisWarmup,
			Classify:   redisstore.ClassifyError,
			Log:        a.log.With(zap.String("redis", a.redisCfg.Target())),
			Registerer: a.reg,
		})
		if !complete && ctx.Err() == nil {
			// Redis did not answer for REDIS_WARMUP_TIMEOUT: down, not
			// slow, so the rules fall back from the first request.
			a.svc.RedisDown("warm-up incomplete")
		}
		return nil
	}}
}

// healthPart runs the health checks (heartbeats) and the lease renewer; at
// shutdown the limiter gives its leases back, while the Redis pipelines are
// still open, and leaves the heartbeats, else the others count it for three
// more intervals.
func (a *App) healthPart() lifecycle.Part {
	return lifecycle.Part{Name: "redis health checks and leases",
		Start: func(context.Context) error { a.svc.Start(); return nil },
		Stop: func(ctx context.Context) error {
			a.svc.Stop()
			leaveCtx, cancel := context.WithTimeout(ctx, a.cfg.RedisCheckTimeout)
			defer cancel()
			_ = a.heartbeats.Leave(leaveCtx)
			return nil
		}}
}

// announce logs that the limiter listens, with what it runs.
func (a *App) announce() {
	cfg := a.cfg
	opsAddr, grpcAddr := "", ""
	if a.opsListener != nil {
		opsAddr = a.opsListener.Address()
	}
	if a.grpcListener != nil {
		grpcAddr = a.grpcListener.address()
	}
	addrs := Addrs{Decisions: a.decisions.Address(), Ops: opsAddr, GRPC: grpcAddr}
	a.addrs.Store(&addrs)
	view := a.rulesMgr.View()
	a.log.Info("limiter listening", zap.String("addr", a.decisions.Address()), zap.String("ops_addr", opsAddr),
		zap.String("grpc_addr", grpcAddr),
		zap.Bool("tls", cfg.TLS != nil), zap.Bool("client_certificates", cfg.TLSFiles.ClientCAFile != ""),
		zap.Bool("api_tokens", len(cfg.APITokens) > 0), zap.Int("rules", len(view.Rules)),
		zap.String("rules_version", view.Version), zap.String("redis", a.redisCfg.Target()),
		zap.Strings("kafka", cfg.KafkaBrokers), zap.String("instance", cfg.Instance),
		zap.Bool("user_ids_case_sensitive", cfg.CaseSensitiveUserIDs))
}
