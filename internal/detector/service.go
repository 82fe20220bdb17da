// Package detector is the detector service core: it decodes a batch of
// decision events, skips and counts what can never be processed, and hands
// the rest to the detection engine, which claims, publishes and settles the
// bans and warnings they trigger, in that order, so a crash at any point
// repeats work but loses none.
package detector

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// Service handles batches of decision events.
type Service struct {
	engine  *abuse.Engine
	metrics *metrics
	log     *zap.Logger
	// throttle keeps the lines about bad events (by kind) and about clocks
	// ahead (by instance) to one per logInterval each.
	throttle *logThrottle
}

// logInterval is how often at most one kind of bad event, or one
// instance's clock ahead, is logged; logKeys bounds the kinds and instances
// tracked (beyond them, they share one line).
const (
	logInterval = time.Minute
	logKeys     = 1000
)

// New returns a Service. Its ban and warning counts start at 0 for every
// reason the engine's detection settings can produce, its invalid-event
// counts for every field.
func New(engine *abuse.Engine, log *zap.Logger, reg prometheus.Registerer) *Service {
	m := newMetrics(reg)
	m.initReasons(engine.BanReasons(), engine.WarnReasons())
	m.initFields(event.InvalidFields())
	return &Service{engine: engine, metrics: m, log: log, throttle: newLogThrottle(logInterval, logKeys)}
}

// Handle processes one batch. An error leaves the batch to be delivered
// again: every step is idempotent (windows keyed by event id, bans by their
// ledger record and id). Only a failure that may pass is returned (Redis or
// Kafka unreachable), and counted: a message that can never be processed,
// because it is not a decision event within the limiter's bounds, is
// skipped and counted here, and whatever a valid event leads to (windows,
// claims, a ban message of bounded size) is within what Redis and Kafka
// accept.
func (s *Service) Handle(ctx context.Context, msgs []event.Message) error {
	err := s.handle(ctx, msgs)
	if err != nil {
		s.metrics.failures.Inc()
	}
	return err
}

func (s *Service) handle(ctx context.Context, msgs []event.Message) error {
	start := time.Now()
	in, rejected := decodeBatch(msgs)
	outcomes, stats, err := s.engine.Process(ctx, in)
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	logIssued(s.log, outcomes)
	// Counted once the batch is done: a batch retried while Redis is down
	// must not count its rejected messages again on every attempt.
	for _, r := range rejected {
		skipMessage(s.log, s.throttle, skipCounters{s.metrics.invalid, s.metrics.undecodable}, "decision event", r.msg, r.err)
	}
	logAhead(s.log, s.throttle, "decision events", stats.Ahead, s.engine.MaxClockSkew())
	s.metrics.observe(stats, time.Since(start))
	return nil
}

// rejection is a message that is no decision event within the limiter's
// bounds, and why.
type rejection struct {
	msg event.Message
	err error
}

// decodeBatch decodes msgs into the engine's inputs and the messages it
// rejects. A rejected message stays in the topic (and the archiver
// dead-letters it); detection cannot use it, now or on any retry.
func decodeBatch(msgs []event.Message) ([]abuse.Input, []rejection) {
	in := make([]abuse.Input, 0, len(msgs))
	var rejected []rejection
	for _, m := range msgs {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			rejected = append(rejected, rejection{m, err})
			continue
		}
		in = append(in, abuse.Input{Partition: m.Partition, Event: ev})
	}
	return in, rejected
}

// ReportStats reports the consumer lag (the buffer fill is not exported).
func (s *Service) ReportStats(lag, _ int64) { s.metrics.lag.Set(float64(lag)) }

type metrics struct {
	events, late, skipped, undecodable, future, failures prometheus.Counter
	invalid                                              *prometheus.CounterVec
	bans, warnings                                       *prometheus.CounterVec
	duration                                             prometheus.Histogram
	lag                                                  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		events:      f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_events_total", Help: "Decision events consumed."}),
		late:        f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_late_events_total", Help: "Events older than the grace behind the newest of their partition, ignored."}),
		skipped:     f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_skipped_events_total", Help: "Events that never count: bans' own denials, exempt clients."}),
		undecodable: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_undecodable_events_total", Help: "Messages that are not decision events."}),
		invalid: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_invalid_events_total",
			Help: "Decision events outside the limiter's bounds, skipped, by the field at fault."}, []string{"field"}),
		future: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_future_events_total",
			Help: "Events stamped more than detection.max_clock_skew ahead of the detector's clock, decided at its time."}),
		failures: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_detector_batch_failures_total",
			Help: "Batches that failed (Redis or Kafka unreachable), retried with their offsets held."}),
		bans:     f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_bans_total", Help: "Bans issued, by detection rule."}, []string{"reason"}),
		warnings: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_warnings_total", Help: "Warnings issued, by detection rule."}, []string{"reason"}),
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

// initFields starts the invalid-event series of the fields given at 0.
func (m *metrics) initFields(fields []string) {
	for _, f := range fields {
		m.invalid.WithLabelValues(f)
	}
}

func (m *metrics) observe(s abuse.Stats, took time.Duration) {
	m.events.Add(float64(s.Consumed))
	m.late.Add(float64(s.Late))
	m.skipped.Add(float64(s.Skipped))
	m.future.Add(float64(s.Future))
	for reason, n := range s.Bans {
		m.bans.WithLabelValues(reason).Add(float64(n))
	}
	for reason, n := range s.Warnings {
		m.warnings.WithLabelValues(reason).Add(float64(n))
	}
	m.duration.Observe(took.Seconds())
}
