// Command devkafka is a Kafka-protocol broker for local runs and tests, not
// for production: one in-process kfake broker that creates the topics of
// the stack (decisions, bans, outcomes, and a gateway access log when
// ACCESS_LOG_TOPIC is set) with bounded retention and stops cleanly on
// SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/buildinfo"
	rwconfig "github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads devkafka's -help; the variables, and the flags that mirror
// them, follow it.
const usage = `Usage: devkafka [flags | version]

A Kafka-protocol broker for local runs and tests, not for production: it
creates the decisions, bans and outcomes topics (and ACCESS_LOG_TOPIC when
set) and stops cleanly on SIGINT or SIGTERM. The environment variables below
configure it, or their flags, which win over them; version (also
-version) prints the build, and help (also -h, -help) this text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "devkafka") {
		return
	}
	if rwconfig.Help(os.Args[1:], os.Stdout, rwconfig.DevKafkaProcess, usage) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// run starts the broker's parts, waits for ctx to end and stops them. It
// returns the process exit code: 0 after a clean stop, 2 for bad
// configuration, 1 when the broker cannot start.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := loadConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "devkafka: %v\n", err)
		return 2
	}
	log, err := telemetry.NewLogger(stderr, "devkafka", cfg.logLevel.String(), cfg.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "devkafka: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()

	if err := parts(cfg, log).Run(ctx); err != nil {
		log.Error("devkafka cannot start", zap.Error(err))
		return 1
	}
	log.Info("devkafka stopped")
	return 0
}

// shutdownTimeout bounds the stop of the group's parts. The broker's own
// stop is not bounded by it: it persists the data dir, however long that
// takes, as it did before devkafka had a lifecycle.
const shutdownTimeout = 10 * time.Second

// parts are devkafka's parts, started in order and stopped in reverse: the
// broker, then the line saying it is ready (and, at the stop, that it is
// stopping, before the broker stops).
func parts(cfg config, log *zap.Logger) *lifecycle.Group {
	var b *devBroker
	g := lifecycle.New(log, shutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "broker",
			Start: func(context.Context) (err error) {
				b, err = startBroker(cfg.broker, log)
				return err
			},
			Stop: func(context.Context) error { b.Stop(); return nil }},
		lifecycle.Part{Name: "announce",
			Start: func(context.Context) error {
				log.Info("devkafka ready",
					zap.String("addr", b.Addr()),
					zap.String("listen", b.ListenAddr()),
					zap.String("topics", strings.Join(b.Topics(), ",")),
					zap.Int("partitions", cfg.broker.Partitions),
					zap.String("data_dir", cfg.broker.DataDir),
					zap.String("retention", cfg.broker.Retention.String()),
					zap.Int64("retention_bytes", cfg.broker.RetentionBytes))
				return nil
			},
			Stop: func(context.Context) error { log.Info("devkafka stopping"); return nil }},
	)
	return g
}
