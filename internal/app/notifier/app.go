// Package notifier assembles the notifier service: the receivers file, the
// consumer of the bans topic in a group of its own, the digests' delivery
// and the ops listener, started in order and stopped in reverse.
// cmd/notifier reads the environment and handles signals; this package is
// everything else, so a test can run notifiers in the test's own process.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	notifying "github.com/ratewarden/ratewarden/internal/notifier"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// Deps are what the notifier takes from its host rather than from its
// configuration.
type Deps struct {
	// Log is the notifier's logger; required.
	Log *zap.Logger
	// Registry holds the notifier's metrics and is what /metrics serves;
	// required. A process uses telemetry.NewRegistry, a test a registry
	// of its own per notifier.
	Registry *prometheus.Registry
	// Now is the clock that closes the digests' windows. Nil: time.Now.
	Now func() time.Time
	// MinBackoff is the first wait after a failed delivery. Zero: 1s
	// (tests shorten it).
	MinBackoff time.Duration
}

// App is one notifier, from New to the end of Run.
type App struct {
	cfg       config.Notifier
	log       *zap.Logger
	receivers []notifying.Receiver
	svc       *notifying.Service
	ops       *ops.Listener
	group     *lifecycle.Group
}

// New reads the receivers file and assembles the notifier; nothing is
// consumed or served before Run.
func New(cfg config.Notifier, deps Deps) (*App, error) {
	if deps.Log == nil || deps.Registry == nil {
		return nil, errors.New("notifier: a logger and a registry are required")
	}
	if cfg.ReceiversFile == "" {
		return nil, errors.New("NOTIFY_RECEIVERS_FILE: required: the YAML file of the webhooks to notify (see docs/ban-notifications.md)")
	}
	receivers, err := notifying.LoadReceivers(cfg.ReceiversFile)
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_RECEIVERS_FILE: %w", err)
	}
	a := &App{cfg: cfg, log: deps.Log, receivers: receivers}
	a.svc, err = notifying.New(notifying.Config{Receivers: receivers, Delay: cfg.DigestDelay, Grace: cfg.DigestGrace,
		MaxPending: cfg.MaxPending, MaxDigests: cfg.MaxDigests,
		Timeout: cfg.Timeout, MinBackoff: deps.MinBackoff, MaxBackoff: cfg.MaxBackoff, Now: deps.Now},
		a.log, deps.Registry)
	if err != nil {
		return nil, err
	}
	a.ops = &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, Log: a.log, Handler: ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(deps.Registry),
		Probes: []ops.Probe{
			{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
		},
		Log: a.log,
	})}
	a.group = a.parts()
	return a, nil
}

// parts returns the notifier's parts in their start order.
func (a *App) parts() *lifecycle.Group {
	g := lifecycle.New(a.log, a.cfg.ShutdownTimeout)
	names := make([]string, len(a.receivers))
	for i, r := range a.receivers {
		names[i] = r.Name
	}
	g.Add(
		lifecycle.Part{Name: "ops listener", Start: a.ops.Listen, Run: a.ops.Serve, Stop: a.ops.Shutdown},
		lifecycle.Part{Name: "ban consumer",
			Start: func(context.Context) error {
				a.log.Info("notifier consuming", zap.String("addr", a.Addr()), zap.String("topic", a.cfg.BansTopic),
					zap.String("group", a.cfg.GroupID), zap.Strings("receivers", names),
					zap.Duration("digest_delay", a.cfg.DigestDelay), zap.Duration("digest_grace", a.cfg.DigestGrace))
				return nil
			},
			Run: a.consume},
	)
	return g
}

// consume reads the bans topic, once it exists, in the notifier's group
// until ctx ends.
func (a *App) consume(ctx context.Context) error {
	log := a.log.Named("consumer")
	if !kafkabus.AwaitTopic(ctx, a.cfg.KafkaBrokers, a.cfg.BansTopic, kafkabus.TopicPoll, log) {
		return nil
	}
	// Fetch ahead little: what the notifier holds is bounded by
	// NOTIFY_MAX_PENDING, not by the reader's queue.
	rd, err := kafkabus.NewGroupReader(kafkabus.ConsumerConfig{Brokers: a.cfg.KafkaBrokers, Topic: a.cfg.BansTopic,
		GroupID: a.cfg.GroupID, Buffer: 100}, log)
	if err != nil {
		return err
	}
	defer func() { _ = rd.Close() }()
	return a.svc.Run(ctx, rd)
}

// Run starts the notifier's parts in order (the ops listener, then the
// consumer), consumes until ctx ends or a part fails, then stops them in
// reverse order under cfg.ShutdownTimeout: a window whose digests are not
// all accepted is left uncommitted, to be read and sent again at the next
// start with the same idempotency keys. It returns the error of the part
// that failed, or nil. Run is called once.
func (a *App) Run(ctx context.Context) error { return a.group.Run(ctx) }

// Addr returns the address the ops listener (/metrics, /healthz, /readyz)
// is bound to, the port chosen for ":0" included, once Run has bound it;
// "" before. It is safe to call from any goroutine.
func (a *App) Addr() string {
	return a.ops.Address()
}
