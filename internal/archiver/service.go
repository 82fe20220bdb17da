// Package archiver is the archiver service core: it turns batches of
// decision, ban and outcome messages into rows and writes each batch in one
// transaction; messages that can never be stored become dead-letter rows in
// the same transaction, so the stream always moves on and nothing is lost.
package archiver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Store is the archive (pgstore.Store).
type Store interface {
	// ValidateViolation, ValidateBan and ValidateOutcome report what Write
	// would refuse in a row. What the database cannot hold is the store's knowledge; the
	// archiver asks so that it dead-letters such a row rather than fail the
	// batch it travels with.
	ValidateViolation(v Violation) error
	ValidateBan(b event.Ban) error
	ValidateOutcome(o event.Outcome) error
	// Write stores one batch in one transaction, all of it or nothing,
	// skipping rows already stored; a row it cannot store is named by a
	// *RowError.
	Write(ctx context.Context, b Batch) (Result, error)
}

// Service handles batches from the decisions, bans and outcomes topics.
type Service struct {
	store          Store
	decisionsTopic string
	bansTopic      string
	outcomesTopic  string
	writeTimeout   time.Duration
	metrics        *metrics
	log            *zap.Logger
}

// Config names the topics and bounds one write.
type Config struct {
	DecisionsTopic, BansTopic, OutcomesTopic string
	// WriteTimeout bounds one transaction (default 30s).
	WriteTimeout time.Duration
}

// New returns a Service.
func New(cfg Config, store Store, log *zap.Logger, reg prometheus.Registerer) *Service {
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	return &Service{store: store, decisionsTopic: cfg.DecisionsTopic, bansTopic: cfg.BansTopic, outcomesTopic: cfg.OutcomesTopic,
		writeTimeout: cfg.WriteTimeout, metrics: newMetrics(reg, cfg.DecisionsTopic, cfg.BansTopic, cfg.OutcomesTopic), log: log}
}

// item is one message turned into what will be written for it.
type item struct {
	msg       event.Message
	violation *Violation
	ban       *event.Ban
	outcome   *event.Outcome
	dead      *DeadLetter
}

// Handle writes the rows of msgs. Decisions that are neither denied nor
// shadow-limited are not archived. An error leaves the offsets uncommitted
// (the caller retries the batch); duplicates are skipped by the database.
// A shutdown does not interrupt a transaction under way: its context
// ignores cancellation and has its own timeout.
func (s *Service) Handle(ctx context.Context, msgs []event.Message) error {
	items := make([]item, 0, len(msgs))
	var oldest time.Time
	for _, m := range msgs {
		it := s.item(m)
		if it.violation == nil && it.ban == nil && it.outcome == nil && it.dead == nil {
			continue // an allowed decision: nothing to archive
		}
		if v := it.violation; v != nil && (oldest.IsZero() || v.OccurredAt.Before(oldest)) {
			oldest = v.OccurredAt
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.writeTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.write(wctx, items)
	if err != nil {
		s.metrics.failures.Inc()
		return fmt.Errorf("archive %d messages: %w", len(items), err)
	}
	s.metrics.observe(res, len(items), time.Since(start), oldest)
	return nil
}

// item decodes and validates one message; whatever cannot be stored becomes
// a dead letter carrying the raw bytes and the reason.
func (s *Service) item(m event.Message) item {
	dead := func(err error) item {
		return item{msg: m, dead: &DeadLetter{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Raw: m.Value, Error: err.Error()}}
	}
	switch m.Topic {
	case s.decisionsTopic:
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			return dead(err)
		}
		if ev.Allowed && !ev.Shadow {
			return item{msg: m}
		}
		v := ViolationFrom(ev)
		if err := s.store.ValidateViolation(v); err != nil {
			return dead(err)
		}
		return item{msg: m, violation: &v}
	case s.bansTopic:
		b, err := event.DecodeBan(m.Value)
		if err != nil {
			return dead(err)
		}
		if err := s.store.ValidateBan(b); err != nil {
			return dead(err)
		}
		return item{msg: m, ban: &b}
	case s.outcomesTopic:
		o, err := event.DecodeOutcome(m.Value)
		if err != nil {
			return dead(err)
		}
		if err := s.store.ValidateOutcome(o); err != nil {
			return dead(err)
		}
		return item{msg: m, outcome: &o}
	default:
		return dead(fmt.Errorf("message from unexpected topic %q", m.Topic))
	}
}

// write stores items in one transaction. The store's validation catches
// what Postgres would reject, but if the database still refuses a row
// (RowError, nothing stored), that row becomes a dead letter and the batch
// is written again, so one bad message never blocks the stream. Any other
// error (transient, or a broken database that an operator must fix) is
// returned: the batch is retried with its offsets held.
func (s *Service) write(ctx context.Context, items []item) (Result, error) {
	for {
		batch, rows := batchOf(items)
		res, err := s.store.Write(ctx, batch)
		var rowErr *RowError
		if err == nil || !errors.As(err, &rowErr) {
			return res, err
		}
		idx := rows[rowErr.Table]
		if rowErr.Index < 0 || rowErr.Index >= len(idx) || items[idx[rowErr.Index]].dead != nil {
			return res, err
		}
		i := idx[rowErr.Index]
		m := items[i].msg
		s.log.Warn("row refused by the database, dead-lettered", zap.String("topic", m.Topic),
			zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(rowErr.Err))
		items[i] = item{msg: m, dead: &DeadLetter{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Raw: m.Value, Error: rowErr.Err.Error()}}
	}
}

// batchOf builds the batch of items and, per table, the item behind each
// row.
func batchOf(items []item) (Batch, map[string][]int) {
	var b Batch
	rows := map[string][]int{}
	for i, it := range items {
		switch {
		case it.violation != nil:
			b.Violations = append(b.Violations, *it.violation)
			rows[ViolationsTable] = append(rows[ViolationsTable], i)
		case it.ban != nil:
			b.Bans = append(b.Bans, *it.ban)
			rows[BansTable] = append(rows[BansTable], i)
		case it.outcome != nil:
			b.Outcomes = append(b.Outcomes, *it.outcome)
			rows[OutcomesTable] = append(rows[OutcomesTable], i)
		case it.dead != nil:
			b.DeadLetters = append(b.DeadLetters, *it.dead)
			rows[DeadLettersTable] = append(rows[DeadLettersTable], i)
		}
	}
	return b, rows
}

// ReportStats returns the consumer-stats callback of a topic: its lag and
// the fill of its fetch-ahead buffer.
func (s *Service) ReportStats(topic string) func(lag, buffered int64) {
	lag, buf := s.metrics.lag.WithLabelValues(topic), s.metrics.buffered.WithLabelValues(topic)
	return func(l, b int64) { lag.Set(float64(l)); buf.Set(float64(b)) }
}

type metrics struct {
	rows        *prometheus.CounterVec
	duplicates  prometheus.Counter
	deadLetters prometheus.Counter
	failures    prometheus.Counter
	flushSize   prometheus.Histogram
	flushTime   prometheus.Histogram
	oldestAge   prometheus.Gauge
	lag         *prometheus.GaugeVec
	buffered    *prometheus.GaugeVec
}

// newMetrics registers the archiver's metrics, the series of every table
// and of the topics given starting at 0, so dashboards and alerts read 0
// rather than nothing before the first batch.
func newMetrics(reg prometheus.Registerer, topics ...string) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		rows:        f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_archiver_rows_inserted_total", Help: "Rows inserted, by table."}, []string{"table"}),
		duplicates:  f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_archiver_duplicates_total", Help: "Rows skipped because they were already archived (redelivery)."}),
		deadLetters: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_archiver_dead_lettered_total", Help: "Messages stored in dead_letters instead of their table."}),
		failures:    f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_archiver_flush_failures_total", Help: "Transactions that failed and will be retried with offsets held."}),
		flushSize: f.NewHistogram(prometheus.HistogramOpts{Name: "rate_limit_archiver_flush_rows", Help: "Rows per transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		flushTime: f.NewHistogram(prometheus.HistogramOpts{Name: "rate_limit_archiver_flush_duration_seconds", Help: "Time of one transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		oldestAge: f.NewGauge(prometheus.GaugeOpts{Name: "rate_limit_archiver_oldest_unflushed_age_seconds", Help: "Age of the oldest violation in the last batch when it was committed."}),
		lag:       f.NewGaugeVec(prometheus.GaugeOpts{Name: "rate_limit_archiver_consumer_lag", Help: "Messages behind the end of each topic."}, []string{"topic"}),
		buffered: f.NewGaugeVec(prometheus.GaugeOpts{Name: "rate_limit_archiver_buffered_messages",
			Help: "Messages fetched ahead and waiting for a batch (bounded; when full, fetching pauses)."}, []string{"topic"}),
	}
	for _, t := range rowsByTable(Result{}) {
		m.rows.WithLabelValues(t.table)
	}
	for _, topic := range topics {
		if topic == "" {
			continue // not consumed
		}
		m.lag.WithLabelValues(topic)
		m.buffered.WithLabelValues(topic)
	}
	return m
}

// tableRows is the number of rows a batch inserted into one table.
type tableRows struct {
	table string
	rows  int
}

// rowsByTable lists the rows r inserted, for every table the archiver
// writes.
func rowsByTable(r Result) []tableRows {
	return []tableRows{
		{ViolationsTable, r.Violations},
		{BansTable, r.Bans},
		{OutcomesTable, r.Outcomes},
		{DeadLettersTable, r.DeadLetters},
	}
}

func (m *metrics) observe(r Result, rows int, took time.Duration, oldest time.Time) {
	for _, t := range rowsByTable(r) {
		m.rows.WithLabelValues(t.table).Add(float64(t.rows))
	}
	m.duplicates.Add(float64(r.Duplicates))
	m.deadLetters.Add(float64(r.DeadLetters))
	m.flushSize.Observe(float64(rows))
	m.flushTime.Observe(took.Seconds())
	if !oldest.IsZero() {
		m.oldestAge.Set(time.Since(oldest).Seconds())
	}
}
