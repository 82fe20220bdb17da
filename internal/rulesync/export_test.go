package rulesync

import "github.com/prometheus/client_golang/prometheus"

// The Manager's tests are an external package: they store rules through
// pgstore, which imports this package. These give them the series they check.

// ReloadsMetric is the reload count of source with result.
func (m *Manager) ReloadsMetric(source, result string) prometheus.Collector {
	return m.metrics.reloads.WithLabelValues(source, result)
}

// LastReloadSuccessfulMetric is the last-reload gauge of source.
func (m *Manager) LastReloadSuccessfulMetric(source string) prometheus.Collector {
	return m.metrics.lastSuccessful.WithLabelValues(source)
}
