// Package warmup readies a service before it opens its listeners, so that
// its first answers are decided as the later ones are: for the limiter,
// Redis connected with its scripts on every primary, and the ban set
// loaded. A warm-up that cannot complete in time never stops the start: the
// service then starts as it would have without one, and its failure
// handling takes over.
package warmup

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
)

// Step is one part of the warm-up. Run must be safe to call again after it
// failed.
type Step struct {
	Name string
	Run  func(ctx context.Context) error
}

// Config is what to warm up, and for how long.
type Config struct {
	// Steps run in order, each until it succeeds.
	Steps []Step
	// Timeout bounds the whole warm-up.
	Timeout time.Duration
	// Retry is the pause before a failed step runs again (default 100ms).
	Retry time.Duration
	// Classify maps a step's error to a bounded class for the log.
	Classify func(error) string
	// Log gets one line: done, or given up with the step and its error.
	Log        *zap.Logger
	Registerer prometheus.Registerer
}

// Run runs the steps, each again after a failure, until all have succeeded,
// Timeout has passed or ctx has ended, and reports whether all succeeded.
// It sets rate_limit_warmup_duration_seconds and rate_limit_warmup_complete,
// and logs a warning naming the step that did not complete unless ctx
// ended (the process is stopping).
func Run(ctx context.Context, cfg Config) bool {
	if cfg.Retry <= 0 {
		cfg.Retry = 100 * time.Millisecond
	}
	duration := promauto.With(cfg.Registerer).NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_warmup_duration_seconds",
		Help: "Time the warm-up took before the listeners opened.",
	})
	complete := promauto.With(cfg.Registerer).NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_warmup_complete",
		Help: "1 when the warm-up completed before the listeners opened, 0 when they opened without it.",
	})
	start := time.Now()
	bounded, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for _, step := range cfg.Steps {
		if err := untilDone(bounded, step.Run, cfg.Retry); err != nil {
			took := time.Since(start)
			duration.Set(took.Seconds())
			if ctx.Err() != nil { // stopping: not a verdict on Redis
				return false
			}
			cfg.Log.Warn("warm-up incomplete, starting without it: rules fall back by their on_redis_failure while Redis fails",
				zap.String("step", step.Name), zap.String("class", cfg.Classify(err)), zap.Error(err), zap.Duration("after", took))
			return false
		}
	}
	took := time.Since(start)
	duration.Set(took.Seconds())
	complete.Set(1)
	cfg.Log.Info("warm-up done", zap.Duration("took", took))
	return true
}

// untilDone calls run until it succeeds or ctx ends, and returns its last
// error; an attempt cut short by the end of ctx tells less than the one
// before it ("connection refused"), which it does not hide.
func untilDone(ctx context.Context, run func(context.Context) error, pause time.Duration) error {
	var last error
	for {
		err := run(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return last
		case <-t.C:
		}
	}
}
