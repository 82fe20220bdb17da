package rulesync

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	sources        []string // the sources in use
	reloads        *prometheus.CounterVec
	lastSuccessful *prometheus.GaugeVec
	dynamicVersion prometheus.Gauge
	loaded         *prometheus.GaugeVec
}

// Results of a load, the result label of rate_limit_rules_reloads_total:
// put in force, found to make the rules in force (not put in force again),
// refused.
const (
	resultSuccess   = "success"
	resultUnchanged = "unchanged"
	resultFailure   = "failure"
)

// resultOf is the result of a load that was not refused.
func resultOf(changed bool) string {
	if changed {
		return resultSuccess
	}
	return resultUnchanged
}

// newMetrics registers the metrics of the rule sources in use (file, rls
// when rls is true, dynamic when dynamic is true), their reload counts
// starting at 0. The last-reload gauge is left without a series until a
// load reports one: a 0 there would read as a refused load.
func newMetrics(reg prometheus.Registerer, dynamic, rls bool) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rules_reloads_total",
			Help: "Rule loads by source (file, rls_config, dynamic) and result (success; unchanged: the rules in force, not applied again; failure: refused, the running rules stayed).",
		}, []string{"source", "result"}),
		lastSuccessful: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_rules_last_reload_successful",
			Help: "1 when the last load of the source (file, rls_config, dynamic) was applied or found unchanged, 0 when it was refused.",
		}, []string{"source"}),
		dynamicVersion: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_rules_dynamic_version",
			Help: "Version of the dynamic rules in force on this instance.",
		}),
		loaded: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_rules",
			Help: "Rules in force by source (file, rls_config, dynamic).",
		}, []string{"source"}),
	}
	m.sources = []string{SourceFile}
	if rls {
		m.sources = append(m.sources, SourceRLS)
	}
	if dynamic {
		m.sources = append(m.sources, SourceDynamic)
	}
	for _, source := range m.sources {
		for _, result := range []string{resultSuccess, resultUnchanged, resultFailure} {
			m.reloads.WithLabelValues(source, result)
		}
	}
	return m
}

func (m *metrics) reload(source, result string) {
	m.reloads.WithLabelValues(source, result).Inc()
	ok := 1.0
	if result == resultFailure {
		ok = 0
	}
	m.lastSuccessful.WithLabelValues(source).Set(ok)
}

func (m *metrics) applied(v *View) {
	m.dynamicVersion.Set(float64(v.DynamicVersion))
	counts := map[string]int{SourceFile: 0, SourceDynamic: 0}
	for _, s := range m.sources {
		counts[s] = 0
	}
	for _, r := range v.Rules {
		counts[r.Source]++
	}
	for source, n := range counts {
		m.loaded.WithLabelValues(source).Set(float64(n))
	}
}
