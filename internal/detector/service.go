// Package detector is the detector service core: it decodes a batch of
// decision events, runs the detection engine over it, publishes the
// resulting bans and warnings and settles them (blacklist entry, ledger),
// in that order, so a crash at any point repeats work but loses none.
package detector

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/detect"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/stream"
)

// Publisher writes ban messages and returns once they are acknowledged.
type Publisher interface {
	Publish(ctx context.Context, bans ...event.Ban) error
}

// Service handles batches of decision events.
type Service struct {
	engine  *detect.Engine
	ledger  detect.Ledger
	pub     Publisher
	metrics *metrics
	log     *zap.Logger
}

// New returns a Service. Its ban and warning counts start at 0 for every
// reason the engine's detection settings can produce.
func New(engine *detect.Engine, ledger detect.Ledger, pub Publisher, log *zap.Logger, reg prometheus.Registerer) *Service {
	m := newMetrics(reg)
	m.initReasons(engine.BanReasons(), engine.WarnReasons())
	return &Service{engine: engine, ledger: ledger, pub: pub, metrics: m, log: log}
}

// Handle processes one batch. An error leaves the batch to be delivered
// again: every step is idempotent (windows keyed by event id, bans by their
// ledger record and id).
func (s *Service) Handle(ctx context.Context, msgs []stream.Message) error {
	start := time.Now()
	in := make([]detect.Input, 0, len(msgs))
	for _, m := range msgs {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			// The message stays in the topic (and the archiver dead-letters
			// it); detection cannot use it.
			s.metrics.undecodable.Inc()
			s.log.Warn("undecodable decision event skipped", zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(err))
			continue
		}
		in = append(in, detect.Input{Partition: m.Partition, Event: ev})
	}
	outcomes, stats, err := s.engine.Process(ctx, in)
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	if len(outcomes) > 0 {
		bans := make([]event.Ban, len(outcomes))
		for i, o := range outcomes {
			bans[i] = o.Ban
		}
		if err := s.pub.Publish(ctx, bans...); err != nil {
			return err
		}
		for _, b := range bans {
			if err := s.ledger.Settle(ctx, b, !b.DryRun); err != nil {
				return fmt.Errorf("settle %s %s %s: %w", b.Action, b.Scope, b.BanID, err)
			}
			s.log.Info("issued", zap.String("action", b.Action), zap.String("scope", b.Scope), zap.String("subject", b.Subject),
				zap.String("reason", b.Reason), zap.Int64("count", b.Count), zap.Int64("duration_s", b.DurationS),
				zap.Bool("dry_run", b.DryRun), zap.String("ban_id", b.BanID))
		}
	}
	s.metrics.observe(stats, time.Since(start))
	return nil
}

// ReportStats reports the consumer lag (the buffer fill is not exported).
func (s *Service) ReportStats(lag, _ int64) { s.metrics.lag.Set(float64(lag)) }

type metrics struct {
	events, late, skipped, undecodable prometheus.Counter
	bans, warnings                     *prometheus.CounterVec
	duration                           prometheus.Histogram
	lag                                prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		events:      f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_events_total", Help: "Decision events consumed."}),
		late:        f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_late_events_total", Help: "Events older than the grace behind the newest of their partition, ignored."}),
		skipped:     f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_skipped_events_total", Help: "Events that never count: bans' own denials, exempt clients."}),
		undecodable: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_undecodable_events_total", Help: "Messages that are not decision events."}),
		bans:        f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_bans_total", Help: "Bans issued, by detection rule."}, []string{"reason"}),
		warnings:    f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_warnings_total", Help: "Warnings issued, by detection rule."}, []string{"reason"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{Name: "rate_limit_detector_batch_duration_seconds", Help: "Time to process one batch of events.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		lag: f.NewGauge(prometheus.GaugeOpts{Name: "rate_limit_detector_consumer_lag", Help: "Messages behind the end of the decisions topic."}),
	}
}

// initReasons starts the ban and warning series of the reasons given at 0,
// so dashboards and alerts read 0 rather than nothing before the first one.
func (m *metrics) initReasons(bans, warnings []string) {
	for _, r := range bans {
		m.bans.WithLabelValues(r)
	}
	for _, r := range warnings {
		m.warnings.WithLabelValues(r)
	}
}

func (m *metrics) observe(s detect.Stats, took time.Duration) {
	m.events.Add(float64(s.Consumed))
	m.late.Add(float64(s.Late))
	m.skipped.Add(float64(s.Skipped))
	for reason, n := range s.Bans {
		m.bans.WithLabelValues(reason).Add(float64(n))
	}
	for reason, n := range s.Warnings {
		m.warnings.WithLabelValues(reason).Add(float64(n))
	}
	m.duration.Observe(took.Seconds())
}
