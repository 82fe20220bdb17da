package limiter

import (
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	redisErrors *prometheus.CounterVec

	mode           *prometheus.GaugeVec
	live           prometheus.Gauge
	healthFailures *prometheus.CounterVec

	overLimitHits prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_requests_total",
			Help: "Decisions by result (ok, rate_limited, banned, exempt, no_rule, unavailable), reporting rule, tier, and shadow (true: a rule in shadow mode would have denied; the request was allowed).",
		}, []string{"result", "rule", "tier", "shadow"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rate_limit_check_duration_seconds",
			Help:    "Time to decide one request, by the algorithm of the reporting rule (none when no rule applied).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"algorithm"}),
		redisErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_redis_errors_total",
			Help: "Redis decision round trips that failed, by error class.",
		}, []string{"class"}),
		mode: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_mode",
			Help: "Decision mode: 1 for the current one (redis, local or permissive), 0 for the others.",
		}, []string{"mode"}),
		live: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_live_instances",
			Help: "Live limiter instances last seen in the Redis heartbeats: the divisor of local limits.",
		}),
		healthFailures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_redis_health_check_failures_total",
			Help: "Redis health checks (heartbeats) that failed, by error class.",
		}, []string{"class"}),
		overLimitHits: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_over_limit_cache_hits_total",
			Help: "Rule decisions answered from the over-limit cache (a key Redis denied, until its retry time) without a Redis round trip.",
		}),
	}
}

// watchOverLimit reports the over-limit cache's size on reg at scrape time.
func (m *metrics) watchOverLimit(reg prometheus.Registerer, c *overLimitCache) {
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_over_limit_cache_entries",
		Help: "Denials held by the over-limit cache, expired ones not yet dropped included.",
	}, func() float64 { return float64(c.len()) })
}

// setMode reports mode as the current one.
func (m *metrics) setMode(mode string) {
	for _, name := range []string{ModeRedis, ModeLocal, ModePermissive} {
		v := 0.0
		if name == mode {
			v = 1
		}
		m.mode.WithLabelValues(name).Set(v)
	}
}

func (m *metrics) observe(d *Decision, tier string, took time.Duration) {
	result := d.Reason
	if d.Unavailable {
		result = "unavailable"
	}
	m.requests.WithLabelValues(result, d.RuleID, tier, strconv.FormatBool(d.Shadow)).Inc()
	alg := string(d.Algorithm)
	if alg == "" {
		alg = "none"
	}
	m.duration.WithLabelValues(alg).Observe(took.Seconds())
}

// tierLabels bounds the tier metric label to the tiers named in the rules:
// anything else a client sends is reported as "other".
type tierLabels []string

func (t tierLabels) label(tier string) string {
	if tier == "" {
		return "none"
	}
	for _, k := range t {
		if strings.EqualFold(k, tier) {
			return k
		}
	}
	return "other"
}

// newEventID returns a time-ordered UUID (v7), which keeps the archive's
// event_id index append-friendly.
func newEventID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
