package rlsapi

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// Label values of the metrics. Every label is bounded:
//   - domain: a domain of the rule set (or of an earlier one), else
//     domainUnknown, so clients cannot mint series with made-up domains;
//   - code of rate_limit_rls_requests_total: one of the result* constants;
//   - descriptor: a rule id of the rule set, one of the descriptor*
//     constants, or for a rule with detailed_metric or value_to_metric
//     levels the rule id and the request's values of those levels, at most
//     Config.MetricValues distinct ones per rule (then "<rule id>._other"),
//     each value cut to maxMetricValue bytes;
//   - code of rate_limit_rls_descriptors_total: one of the outcome*
//     constants;
//   - field: one of invalidFields.
const (
	domainUnknown = "_unknown"

	resultOK              = "ok"
	resultOverLimit       = "over_limit"
	resultUnavailable     = "unavailable"     // a deny-policy rule could not be decided
	resultInvalid         = "invalid"         // refused: outside the bounds
	resultUnauthenticated = "unauthenticated" // refused: no valid bearer token (domain _unknown)

	descriptorNone   = "_none"   // no rule matched
	descriptorBanned = "_banned" // the client address is banned: no rule was decided
	descriptorExempt = "_exempt" // the request is exempt: no rule was decided
	otherValues      = "._other" // appended to a rule id past Config.MetricValues values
	maxMetricValue   = 64

	outcomeOK        = "ok"
	outcomeOverLimit = "over_limit"
	outcomeShadow    = "shadow_over_limit" // a shadow rule over its limit, answered OK
)

type metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	shadow      prometheus.Counter
	invalid     *prometheus.CounterVec

	maxValues int
	mu        sync.Mutex
	values    map[string]map[string]bool // rule id → detailed labels given out
}

func newMetrics(reg prometheus.Registerer, maxValues int) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rls_requests_total",
			Help: "Rate limit API calls (ShouldRateLimit, POST /json) by domain (_unknown: not in the rules) and code (ok, over_limit, unavailable, invalid, unauthenticated), before global shadow mode.",
		}, []string{"domain", "code"}),
		descriptors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rls_descriptors_total",
			Help: "Descriptors of rate limit API calls by domain, descriptor (the matched rule id, with the values of its detailed_metric levels; _none, _banned, _exempt) and code (ok, over_limit, shadow_over_limit: a shadow rule over its limit answered OK).",
		}, []string{"domain", "descriptor", "code"}),
		shadow: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_rls_shadow_overrides_total",
			Help: "Rate limit API calls answered OK instead of OVER_LIMIT by the global shadow mode.",
		}),
		invalid: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rls_invalid_requests_total",
			Help: "Rate limit API calls refused as invalid, by the field at fault (domain, descriptors, entries, key, value, hits_addend, body).",
		}, []string{"field"}),
		maxValues: maxValues,
		values:    map[string]map[string]bool{},
	}
	for _, f := range invalidFields {
		m.invalid.WithLabelValues(f)
	}
	m.requests.WithLabelValues(domainUnknown, resultInvalid)
	m.requests.WithLabelValues(domainUnknown, resultUnauthenticated)
	return m
}

// observe counts the descriptors of req as d decided them.
func (m *metrics) observe(domain string, req *rules.DescriptorRequest, d *limiter.Decision) {
	n := len(req.Descriptors)
	switch d.Reason {
	case event.ReasonBanned:
		m.descriptors.WithLabelValues(domain, descriptorBanned, outcomeOverLimit).Add(float64(n))
		return
	case event.ReasonExempt:
		m.descriptors.WithLabelValues(domain, descriptorExempt, outcomeOK).Add(float64(n))
		return
	}
	for i := range d.Applied {
		a := &d.Applied[i]
		code := outcomeOK
		switch {
		case d.Results[i].Allowed || a.Rule.Descriptor.Unlimited:
		case a.Rule.Shadow:
			code = outcomeShadow
		default:
			code = outcomeOverLimit
		}
		m.descriptors.WithLabelValues(domain, m.descriptorLabel(a, req.Descriptors[a.Descriptor].Entries), code).Inc()
	}
	if none := n - len(d.Applied); none > 0 { // a rule matches a descriptor at most once
		m.descriptors.WithLabelValues(domain, descriptorNone, outcomeOK).Add(float64(none))
	}
}

// descriptorLabel is the descriptor label of a descriptor a rule decided:
// the rule id, followed for each level whose entry asks for it
// (detailed_metric, value_to_metric) by ".<key>_<value>", as
// envoyproxy/ratelimit names its stats.
func (m *metrics) descriptorLabel(a *rules.Applied, entries []rules.Entry) string {
	id := a.Rule.ID
	levels := a.Rule.Descriptor.Entries
	var b strings.Builder
	for i, e := range levels {
		if !e.DetailedMetric && !e.ValueToMetric || i >= len(entries) {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(id)
		}
		b.WriteByte('.')
		b.WriteString(entries[i].Key)
		b.WriteByte('_')
		b.WriteString(truncate(entries[i].Value, maxMetricValue))
	}
	if b.Len() == 0 {
		return id
	}
	label := b.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.values[id]
	if seen == nil {
		seen = map[string]bool{}
		m.values[id] = seen
	}
	if !seen[label] {
		if len(seen) >= m.maxValues {
			return id + otherValues
		}
		seen[label] = true
	}
	return label
}

// dropRemovedRules deletes the descriptor series of rules that are not in
// set, their detailed values with them, and forgets those values: a config
// source that renames its rules at every change (an xDS management server)
// would otherwise grow the series by every value of every rule it ever
// named. Every series is looked at, so one that a call still deciding
// under the previous rules made again goes at the next change.
func (m *metrics) dropRemovedRules(set *rules.Set) {
	ruleOf := map[string]string{} // detailed label → its rule id
	m.mu.Lock()
	for id, labels := range m.values {
		for l := range labels {
			ruleOf[l] = id
		}
		ruleOf[id+otherValues] = id
		if set.Rule(id) == nil {
			delete(m.values, id)
		}
	}
	m.mu.Unlock()
	telemetry.DeleteSeries(m.descriptors, func(labels prometheus.Labels) bool {
		d := labels["descriptor"]
		if d == "" || d[0] == '_' { // _none, _banned, _exempt: no rule id starts with '_'
			return false
		}
		id, detailed := ruleOf[d]
		if !detailed {
			id = d
		}
		return set.Rule(id) == nil
	})
}

// truncate cuts s to at most max bytes without splitting a character.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
