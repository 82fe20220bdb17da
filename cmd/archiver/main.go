// Command archiver stores violations and ban history in Postgres for
// analysts: batched, idempotent, offsets committed only after the database.
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

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "archiver:", err)
		os.Exit(1)
	}
}

// run prepares the database, then consumes both topics until ctx is
// cancelled; a batch under way is committed before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see README)", args)
	}
	cfg, err := config.LoadArchiver(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	reg := telemetry.NewRegistry()

	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pgstore.EnsureDatabase(setupCtx, cfg.DatabaseURL); err != nil {
		log.Warn("could not create the database (it may already exist or the role may not create it)", zap.Error(err))
	}
	store, err := pgstore.Open(setupCtx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(setupCtx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	cancel()

	svc := archiver.New(archiver.Config{DecisionsTopic: cfg.DecisionsTopic, BansTopic: cfg.BansTopic}, store, log, reg)
	handler := ops.NewHandler(ops.Config{Metrics: telemetry.MetricsHandler(reg), Log: log, Probes: []ops.Probe{
		{Name: "postgres", Required: true, Check: store.Ping},
		{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
	}})
	srv := ops.NewServer(handler, log)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("LISTEN_ADDR %s: %w", cfg.ListenAddr, err)
	}
	go func() { _ = srv.Serve(ln) }()

	log.Info("archiver consuming", zap.String("addr", ln.Addr().String()), zap.Strings("topics", []string{cfg.DecisionsTopic, cfg.BansTopic}),
		zap.String("group", cfg.GroupID), zap.Int("batch", cfg.BatchSize), zap.Duration("flush", cfg.FlushInterval))
	// A consumer that fails for good stops the process (it would otherwise
	// stall silently): the others are stopped with it.
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var (
		wg       sync.WaitGroup
		failOnce sync.Once
	)
	wg.Go(func() { maintainPartitions(runCtx, store, cfg, log) })
	// Several consumers of the decisions topic in one group split its
	// partitions, so decoding one batch overlaps writing another.
	topics := []string{cfg.BansTopic}
	for range cfg.Consumers {
		topics = append(topics, cfg.DecisionsTopic)
	}
	for _, topic := range topics {
		wg.Go(func() {
			cerr := kafkabus.Consume(runCtx, kafkabus.ConsumerConfig{
				Brokers: cfg.KafkaBrokers, Topic: topic, GroupID: cfg.GroupID,
				BatchSize: cfg.BatchSize, BatchWait: cfg.FlushInterval, OnStats: svc.ReportStats(topic),
			}, log.Named("consumer").With(zap.String("topic", topic)), svc.Handle)
			if cerr != nil {
				failOnce.Do(func() { err = cerr })
				stopAll()
			}
		})
	}
	wg.Wait()

	log.Info("shutting down")
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelShutdown()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		log.Warn("http shutdown", zap.Error(serr))
	}
	log.Info("stopped")
	return err
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
