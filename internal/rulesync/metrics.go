package rulesync

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	reloads        *prometheus.CounterVec
	lastSuccessful *prometheus.GaugeVec
	dynamicVersion prometheus.Gauge
	loaded         *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rules_reloads_total",
			Help: "Rule loads by source (file, dynamic) and result (success, failure: refused, the running rules stayed).",
		}, []string{"source", "result"}),
		lastSuccessful: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_rules_last_reload_successful",
			Help: "1 when the last load of the source (file, dynamic) was applied, 0 when it was refused.",
		}, []string{"source"}),
		dynamicVersion: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_rules_dynamic_version",
			Help: "Version of the dynamic rules in force on this instance.",
		}),
		loaded: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_rules",
			Help: "Rules in force by source (file, dynamic).",
		}, []string{"source"}),
	}
}

func (m *metrics) reload(source string, ok bool) {
	result, v := "success", 1.0
	if !ok {
		result, v = "failure", 0
	}
	m.reloads.WithLabelValues(source, result).Inc()
	m.lastSuccessful.WithLabelValues(source).Set(v)
}

func (m *metrics) applied(v *View) {
	m.dynamicVersion.Set(float64(v.DynamicVersion))
	counts := map[string]int{SourceFile: 0, SourceDynamic: 0}
	for _, r := range v.Rules {
		counts[r.Source]++
	}
	for source, n := range counts {
		m.loaded.WithLabelValues(source).Set(float64(n))
	}
}
