package limiter

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// lastRequests and lastDuration are the series observe used last: a hot
	// key asks for the same ones decision after decision, and comparing
	// their labels costs less than hashing them into the vectors.
	lastRequests atomic.Pointer[requestSeries]
	lastDuration atomic.Pointer[durationSeries]
	redisErrors  *prometheus.CounterVec

	mode           *prometheus.GaugeVec
	live           prometheus.Gauge
	liveSource     *prometheus.GaugeVec
	healthFailures *prometheus.CounterVec

	overLimitHits   prometheus.Counter
	unknownOutcomes prometheus.Counter
	reports         *prometheus.CounterVec
	reportsSpared   *prometheus.CounterVec
	unfoldedUserIDs prometheus.Counter

	holds       *prometheus.CounterVec
	holdsLapsed *prometheus.CounterVec
	// reservations and reservedUnits count the reservations of rules spent
	// by reports (reservations.go).
	reservations  *prometheus.CounterVec
	reservedUnits *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
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
		liveSource: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_live_instances_source",
			Help: "Where rate_limit_live_instances comes from: 1 for the current source (heartbeats, redis, disk, expected, none), 0 for the others.",
		}, []string{"source"}),
		healthFailures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_redis_health_check_failures_total",
			Help: "Redis health checks (heartbeats) that failed, by error class.",
		}, []string{"class"}),
		unknownOutcomes: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_redis_unknown_outcomes_total",
			Help: "Decisions whose Redis round trip failed after it may have run (a timeout): their local rules refused them rather than admit them on a local budget.",
		}),
		overLimitHits: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_over_limit_cache_hits_total",
			Help: "Rule decisions answered from the over-limit cache (a key Redis denied, until its retry time) without a Redis round trip.",
		}),
		reports: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_reports_total",
			Help: "Outcome reports (POST /v1/report) by the class of the status reported: 1xx to 5xx.",
		}, []string{"status"}),
		reportsSpared: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_reports_spared_total",
			Help: "Outcome reports that spent less than the rules they match, by why: banned (their client IP; nothing), exempt (their address or endpoint; nothing), user_banned (a locked account) and user_exempt (only the rules not keyed by user_id).",
		}, []string{"reason"}),
		holds: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_holds_total",
			Help: "Holds of concurrency rules by rule and result: taken (a check or an Envoy request-time call took one), denied (one found its key full), released (a report, an Envoy stream-done call, or the refusal of the request that took it, ended one), unknown (a report or a stream-done call named a hold its key does not hold, or found none to release: unknown, released already, lapsed, or another key's; nothing changed), unnamed (a stream-done call named no hold id, of a descriptor rule that releases by id only; nothing changed).",
		}, []string{"rule", "result"}),
		holdsLapsed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_holds_lapsed_total",
			Help: "Holds of concurrency rules that nobody released and that lapsed after the rule's hold lifetime, by rule (counted when a later call on the key finds them).",
		}, []string{"rule"}),
		reservations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_reservations_total",
			Help: "Reservations of rules spent by reports, by rule and result: taken (a check reserved its estimate), denied (a check's estimate did not fit), returned (the request was refused: the reservation went back at once), settled (a report settled one with its actual cost), unknown (a report named a reservation its key does not hold: unknown, settled already, lapsed, or another key's; nothing changed).",
		}, []string{"rule", "result"}),
		reservedUnits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_reservation_units_total",
			Help: "Units of the reservations of rules spent by reports, by rule and kind: reserved (taken by checks), refunded (given back by settles and by refused requests), excess (debited by settles beyond the reservation).",
		}, []string{"rule", "kind"}),
		unfoldedUserIDs: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_unfolded_user_ids_total",
			Help: "Checks and reports whose user id was another spelling of its key (case, compatibility forms): limited and banned as its key.",
		}),
	}
	for _, c := range []string{"1xx", "2xx", "3xx", "4xx", "5xx"} {
		m.reports.WithLabelValues(c)
	}
	for _, r := range []string{sparedBanned, sparedExempt, sparedUserBanned, sparedUserExempt} {
		m.reportsSpared.WithLabelValues(r)
	}
	m.setLiveSource(SourceNone)
	return m
}

// watchOverLimit reports the over-limit cache's size on reg at scrape time.
func (m *metrics) watchOverLimit(reg prometheus.Registerer, c *overLimitCache) {
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_over_limit_cache_entries",
		Help: "Denials held by the over-limit cache, expired ones not yet dropped included.",
	}, func() float64 { return float64(c.len()) })
}

// watchLocal reports the size and evictions of local-mode state on reg at
// scrape time.
func (m *metrics) watchLocal(reg prometheus.Registerer, mem *decide.Memory) {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_local_keys",
		Help: "Keys of local-mode state held in memory (bounded by LOCAL_MAX_KEYS), expired ones not yet swept included.",
	}, func() float64 { return float64(mem.Len()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "rate_limit_local_evictions_total",
		Help: "Keys of local-mode state evicted to stay within LOCAL_MAX_KEYS (the sampled key that would expire soonest).",
	}, func() float64 { return float64(mem.Evictions()) })
}

// setMode reports mode as the current one.
func (m *metrics) setMode(mode Mode) {
	for _, name := range []Mode{ModeRedis, ModeLocal, ModePermissive} {
		v := 0.0
		if name == mode {
			v = 1
		}
		m.mode.WithLabelValues(string(name)).Set(v)
	}
}

// Labels of the decision metrics besides the reasons of a decision.
const (
	resultUnavailable = "unavailable" // a deny-policy rule could not be decided
	algorithmNone     = "none"        // no rule applied
)

func (m *metrics) observe(d *Decision, tier string, took time.Duration) {
	result := d.Reason
	if d.Unavailable {
		result = resultUnavailable
	}
	r := m.lastRequests.Load()
	if r == nil || r.result != result || r.rule != d.RuleID || r.tier != tier || r.shadow != d.Shadow {
		r = &requestSeries{result: result, rule: d.RuleID, tier: tier, shadow: d.Shadow,
			c: m.requests.WithLabelValues(result, d.RuleID, tier, strconv.FormatBool(d.Shadow))}
		m.lastRequests.Store(r)
	}
	r.c.Inc()
	alg := string(d.Algorithm)
	if alg == "" {
		alg = algorithmNone
	}
	h := m.lastDuration.Load()
	if h == nil || h.algorithm != alg {
		h = &durationSeries{algorithm: alg, o: m.duration.WithLabelValues(alg)}
		m.lastDuration.Store(h)
	}
	h.o.Observe(took.Seconds())
}

// requestSeries is a series of rate_limit_requests_total and its labels.
type requestSeries struct {
	result, rule, tier string
	shadow             bool
	c                  prometheus.Counter
}

// durationSeries is a series of rate_limit_check_duration_seconds and its
// label.
type durationSeries struct {
	algorithm string
	o         prometheus.Observer
}

// initErrorClasses starts the series of every Redis error class at 0, so
// dashboards and alerts read 0 rather than nothing before the first error.
func (m *metrics) initErrorClasses(classes []string) {
	for _, c := range classes {
		m.redisErrors.WithLabelValues(c)
		m.healthFailures.WithLabelValues(c)
	}
}

// initRules starts at 0 the decision series set can produce: for each rule,
// every tier its match admits, with the results ok and rate_limited
// (enforced and shadow: the dashboard reads shadow denials, which are 0
// rather than missing while no rule is in shadow mode) and, for a rule
// that denies when Redis fails, unavailable; without a rule, the results
// exempt, banned and no_rule for every tier. The series of rules no longer
// in set are deleted (dropRemovedRules).
func (m *metrics) initRules(set *rules.Set, tiers tierLabels) {
	m.dropRemovedRules(set)
	all := tiers.all()
	for _, r := range set.Rules() {
		admitted := all
		if len(r.Match.Tiers) > 0 {
			admitted = make([]string, 0, len(r.Match.Tiers))
			for _, t := range r.Match.Tiers {
				admitted = append(admitted, tiers.label(t))
			}
		}
		for _, t := range admitted {
			m.requests.WithLabelValues(event.ReasonOK, r.ID, t, "false")
			m.requests.WithLabelValues(event.ReasonRateLimited, r.ID, t, "false")
			m.requests.WithLabelValues(event.ReasonRateLimited, r.ID, t, "true")
			if r.OnRedisFailure == rules.FailDeny && !r.Shadow {
				m.requests.WithLabelValues(resultUnavailable, r.ID, t, "false")
			}
		}
		m.duration.WithLabelValues(string(r.Algorithm))
	}
	for _, t := range all {
		for _, reason := range []string{event.ReasonExempt, event.ReasonBanned, event.ReasonNoRule} {
			m.requests.WithLabelValues(reason, "", t, "false")
		}
	}
	m.duration.WithLabelValues(algorithmNone)
	m.initHoldRules(set)
	m.initReserveRules(set)
}

// tierLabels bounds the tier metric label to the tiers named in the rules:
// anything else a client sends is reported as "other".
type tierLabels []string

func (t tierLabels) label(tier string) string {
	if tier == "" {
		return tierNone
	}
	for _, k := range t {
		if strings.EqualFold(k, tier) {
			return k
		}
	}
	return tierOther
}

// all returns every value label can return.
func (t tierLabels) all() []string {
	return append([]string{tierNone, tierOther}, t...)
}

// Tier labels of requests without a tier and with one no rule names.
const (
	tierNone  = "none"
	tierOther = "other"
)

// dropRemovedRules deletes the decision series of rules that are not in
// set: a config source that renames its rules on every change (an xDS
// management server) would otherwise grow the series, and the limiter's
// memory, without bound. Prometheus keeps what it scraped of them, and
// rate() reads a series that ends. Every series is looked at, so one that a
// request still deciding under the previous rules made again goes too.
func (m *metrics) dropRemovedRules(set *rules.Set) {
	removed := func(labels prometheus.Labels) bool {
		id := labels["rule"]
		return id != "" && set.Rule(id) == nil
	}
	telemetry.DeleteSeries(m.requests, removed)
	// The series observe used last may be one just deleted: a decision of
	// a removed rule must not count in it, out of the registry's sight,
	// rather than in the series its labels make anew.
	m.lastRequests.Store(nil)
	telemetry.DeleteSeries(m.holds, removed)
	telemetry.DeleteSeries(m.holdsLapsed, removed)
	telemetry.DeleteSeries(m.reservations, removed)
	telemetry.DeleteSeries(m.reservedUnits, removed)
}
