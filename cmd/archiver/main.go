// Command archiver stores violations, ban history and outcome reports in
// Postgres for analysts: batched, idempotent, offsets committed only after
// the database.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the archiver's -help; the variables follow it.
const usage = `Usage: archiver [help | version]

Stores violations, ban history and outcome reports in Postgres. The
environment variables below configure it; version (also -version)
prints the build, and help (also -h, -help) this text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "archiver") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.ArchiverProcess, usage) {
		return
	}
	lifecycle.Main("archiver", run)
}

// run prepares the database, then consumes the decisions, bans and
// outcomes topics until ctx is cancelled; a batch under way is committed
// before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see archiver -help)", args)
	}
	cfg, err := config.LoadArchiver(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "archiver", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	reg := telemetry.NewRegistry()

	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	svc := archiver.New(archiver.Config{DecisionsTopic: cfg.DecisionsTopic, BansTopic: cfg.BansTopic, OutcomesTopic: cfg.OutcomesTopic},
		store, log, reg)
	opsListener := &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, Log: log, Handler: ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(reg),
		Probes: []ops.Probe{
			{Name: "postgres", Required: true, Check: store.Ping},
			{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
		},
		Log: log,
	})}

	g := lifecycle.New(log, cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "postgres", Stop: func(context.Context) error { store.Close(); return nil }},
		lifecycle.Part{Name: "ops listener", Start: opsListener.Listen, Run: opsListener.Serve, Stop: opsListener.Shutdown},
		lifecycle.Part{Name: "partition maintenance", Run: func(ctx context.Context) error {
			maintainPartitions(ctx, store, cfg, log)
			return nil
		}},
	)
	// Several consumers of the decisions topic in one group split its
	// partitions, so decoding one batch overlaps writing another; as many
	// for the outcomes topic, every message of which is a row. One that
	// fails for good stops the process (it would otherwise stall silently).
	topics := []string{cfg.BansTopic}
	for range cfg.Consumers {
		topics = append(topics, cfg.DecisionsTopic, cfg.OutcomesTopic)
	}
	g.Add(lifecycle.Part{Name: "consumers", Run: func(ctx context.Context) error {
		// Side by side: they stop together, each committing its batch.
		consumers, ctx := errgroup.WithContext(ctx)
		// A topic missing from the cluster would leave the whole group
		// without partitions, so a topic's consumers join only once it
		// exists (the outcomes topic may come after an upgrade).
		ready := map[string]chan struct{}{}
		for _, topic := range topics {
			if _, ok := ready[topic]; ok {
				continue
			}
			exists := make(chan struct{})
			ready[topic] = exists
			consumers.Go(func() error {
				if kafkabus.AwaitTopic(ctx, cfg.KafkaBrokers, topic, kafkabus.TopicPoll, log) {
					close(exists)
				}
				return nil
			})
		}
		for _, topic := range topics {
			consumers.Go(func() error {
				select {
				case <-ctx.Done():
					return nil
				case <-ready[topic]:
				}
				return kafkabus.Consume(ctx, kafkabus.ConsumerConfig{
					Brokers: cfg.KafkaBrokers, Topic: topic, GroupID: cfg.GroupID,
					BatchSize: cfg.BatchSize, BatchWait: cfg.FlushInterval, OnStats: svc.ReportStats(topic),
				}, log.Named("consumer").With(zap.String("topic", topic)), svc.Handle)
			})
		}
		return consumers.Wait()
	}})
	g.Add(lifecycle.Part{Name: "announce", Start: func(context.Context) error {
		log.Info("archiver consuming", zap.String("addr", opsListener.Address()), zap.Strings("topics", []string{cfg.DecisionsTopic, cfg.BansTopic, cfg.OutcomesTopic}),
			zap.String("group", cfg.GroupID), zap.Int("batch", cfg.BatchSize), zap.Duration("flush", cfg.FlushInterval))
		return nil
	}})
	return g.Run(ctx)
}

// openStore opens the database, creating it if it is missing and the role
// may, and migrates the schema.
func openStore(ctx context.Context, cfg config.Archiver, log *zap.Logger) (*pgstore.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pgstore.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		log.Warn("could not create the database (it may already exist or the role may not create it)", zap.Error(err))
	}
	store, err := pgstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return store, nil
}

// maintainPartitions creates daily partitions ahead of time and drops those
// past retention, with the dead letters past retention, at start and every
// hour.
func maintainPartitions(ctx context.Context, store *pgstore.Store, cfg config.Archiver, log *zap.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		if err := store.EnsurePartitions(ctx, now, cfg.PartitionsAhead); err != nil && ctx.Err() == nil {
			log.Warn("creating partitions", zap.Error(err))
		}
		dropped, err := store.DropPartitions(ctx, now, cfg.RetentionDays)
		if err != nil && ctx.Err() == nil {
			log.Warn("dropping old partitions", zap.Error(err))
		}
		if len(dropped) > 0 {
			log.Info("dropped partitions past retention", zap.Strings("partitions", dropped))
		}
		if n, err := store.PruneDeadLetters(ctx, cfg.RetentionDays); err != nil && ctx.Err() == nil {
			log.Warn("deleting old dead letters", zap.Error(err))
		} else if n > 0 {
			log.Info("deleted dead letters past retention", zap.Int64("rows", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
