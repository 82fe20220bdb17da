package notifier

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Results of rate_limit_notifier_delivery_attempts_total: one attempt's
// outcome, by class.
const (
	resultOK         = "ok"
	resultTimeout    = "timeout"
	resultConnection = "connection"
	resultRedirect   = "status_3xx"
	resultClient     = "status_4xx"
	resultServer     = "status_5xx"
	resultOther      = "other"
)

var attemptResults = []string{resultOK, resultTimeout, resultConnection, resultRedirect, resultClient, resultServer, resultOther}

// Reasons of rate_limit_notifier_messages_skipped_total.
const (
	skipUndecodable = "undecodable"
)

type metrics struct {
	messages     prometheus.Counter
	skipped      *prometheus.CounterVec
	pending      prometheus.Gauge
	lag          prometheus.Gauge
	attempts     *prometheus.CounterVec
	retries      *prometheus.CounterVec
	delivered    *prometheus.CounterVec
	bans         *prometheus.CounterVec
	digestBans   *prometheus.HistogramVec
	windowClosed prometheus.Gauge
}

// newMetrics registers the notifier's metrics on reg, each receiver's
// series created at 0.
func newMetrics(reg prometheus.Registerer, receivers []string) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		messages: f.NewCounter(prometheus.CounterOpts{Name: "rate_limit_notifier_messages_total",
			Help: "Messages of the bans topic read (a redelivered one again)."}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_notifier_messages_skipped_total",
			Help: "Messages of the bans topic that are not a ban, an unban or a warning: skipped and committed with their window."}, []string{"reason"}),
		pending: f.NewGauge(prometheus.GaugeOpts{Name: "rate_limit_notifier_pending_messages",
			Help: "Messages read and not yet committed (their window open or its digests not yet accepted); bounded by NOTIFY_MAX_PENDING."}),
		lag: f.NewGauge(prometheus.GaugeOpts{Name: "rate_limit_notifier_consumer_lag",
			Help: "Messages behind the end of the bans topic's partition last read."}),
		attempts: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_notifier_delivery_attempts_total",
			Help: "Requests to receivers, by result."}, []string{"receiver", "result"}),
		retries: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_notifier_delivery_retries_total",
			Help: "Requests to receivers that repeat a failed one."}, []string{"receiver"}),
		delivered: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_notifier_digests_delivered_total",
			Help: "Digests a receiver accepted (2xx)."}, []string{"receiver"}),
		bans: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_notifier_bans_delivered_total",
			Help: "Bans, unbans and warnings counted in the digests receivers accepted."}, []string{"receiver"}),
		digestBans: f.NewHistogramVec(prometheus.HistogramOpts{Name: "rate_limit_notifier_digest_bans",
			Help:    "Bans counted per digest accepted.",
			Buckets: []float64{1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10000}}, []string{"receiver"}),
		windowClosed: f.NewGauge(prometheus.GaugeOpts{Name: "rate_limit_notifier_last_window_end_timestamp_seconds",
			Help: "End of the last window whose digests were all accepted and whose offsets were committed (Unix seconds)."}),
	}
	m.skipped.WithLabelValues(skipUndecodable)
	for _, r := range receivers {
		for _, res := range attemptResults {
			m.attempts.WithLabelValues(r, res)
		}
		m.retries.WithLabelValues(r)
		m.delivered.WithLabelValues(r)
		m.bans.WithLabelValues(r)
	}
	return m
}
