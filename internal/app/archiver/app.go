// Package archiver assembles the archiver service: the database, the
// consumers of the decisions, bans and outcomes topics, the ops listener
// and the partition maintenance, started in order and stopped in reverse.
// cmd/archiver reads the environment and handles signals; this package is
// everything else, so a test can run several archivers in one process.
package archiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	archiving "github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// Deps are what the archiver takes from its host rather than from its
// configuration.
type Deps struct {
	// Log is the archiver's logger; required.
	Log *zap.Logger
	// Registry holds the archiver's metrics and is what /metrics serves;
	// required. A process uses telemetry.NewRegistry, a test a registry
	// of its own per archiver.
	Registry *prometheus.Registry
	// Now is the clock partition maintenance reads. Nil: time.Now.
	Now func() time.Time
}

// App is one archiver, from New to the end of Run.
type App struct {
	cfg        config.Archiver
	log        *zap.Logger
	now        func() time.Time
	store      *pgstore.Store
	closeStore func()
	svc        *archiving.Service
	ops        *ops.Listener
	group      *lifecycle.Group
}

// New opens the database (creating it when it is missing and the role may)
// and migrates its schema, then assembles the archiver; nothing is consumed
// or served before Run. ctx bounds the opening only. Once New has returned
// an App, Run must be called to release the database, even with a context
// already ended.
func New(ctx context.Context, cfg config.Archiver, deps Deps) (*App, error) {
	if deps.Log == nil || deps.Registry == nil {
		return nil, fmt.Errorf("archiver: a logger and a registry are required")
	}
	a := &App{cfg: cfg, log: deps.Log, now: deps.Now}
	if a.now == nil {
		a.now = time.Now
	}
	store, err := openStore(ctx, cfg, a.log)
	if err != nil {
		return nil, err
	}
	a.store, a.closeStore = store, sync.OnceFunc(store.Close)
	a.svc = archiving.New(archiving.Config{DecisionsTopic: cfg.DecisionsTopic, BansTopic: cfg.BansTopic, OutcomesTopic: cfg.OutcomesTopic},
		store, a.log, deps.Registry)
	a.ops = &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, Log: a.log, Handler: ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(deps.Registry),
		Probes: []ops.Probe{
			{Name: "postgres", Required: true, Check: store.Ping},
			{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
		},
		Log: a.log,
	})}
	a.group = a.parts()
	return a, nil
}

// parts returns the archiver's parts in their start order.
func (a *App) parts() *lifecycle.Group {
	g := lifecycle.New(a.log, a.cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "postgres", Stop: func(context.Context) error { a.closeStore(); return nil }},
		lifecycle.Part{Name: "ops listener", Start: a.ops.Listen, Run: a.ops.Serve, Stop: a.ops.Shutdown},
		lifecycle.Part{Name: "partition maintenance", Run: func(ctx context.Context) error {
			maintainPartitions(ctx, a.store, a.cfg, a.now, a.log)
			return nil
		}},
		lifecycle.Part{Name: "consumers", Run: a.consume},
		lifecycle.Part{Name: "announce", Start: func(context.Context) error {
			a.log.Info("archiver consuming", zap.String("addr", a.Addr()),
				zap.Strings("topics", []string{a.cfg.DecisionsTopic, a.cfg.BansTopic, a.cfg.OutcomesTopic}),
				zap.String("group", a.cfg.GroupID), zap.Int("batch", a.cfg.BatchSize), zap.Duration("flush", a.cfg.FlushInterval))
			return nil
		}},
	)
	return g
}

// Run starts the archiver's parts in order (the ops listener, partition
// maintenance, the consumers), serves until ctx ends or a part fails, then
// stops them in reverse order under cfg.ShutdownTimeout: a batch under way
// is committed, and the database is closed last. It returns the error of
// the part that failed, or nil. Run is called once.
func (a *App) Run(ctx context.Context) error {
	defer a.closeStore() // when ctx ended before the group started its parts
	return a.group.Run(ctx)
}

// Addr returns the address the ops listener (/metrics, /healthz, /readyz)
// is bound to, the port chosen for ":0" included, once Run has bound it;
// "" before. It is safe to call from any goroutine.
func (a *App) Addr() string {
	return a.ops.Address()
}
