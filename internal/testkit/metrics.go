package testkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricSum reads the family name from g: the sum of its samples whose
// labels include every pair of labels (nil: all of them), counting a
// counter's or gauge's value and a histogram's or summary's number of
// observations. A family with no sample reads 0, as a counter not yet
// counted would.
func MetricSum(tb testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	tb.Helper()
	families, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather metrics: %v", err)
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue samples
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetSummary() != nil:
				sum += float64(m.GetSummary().GetSampleCount())
			case m.GetUntyped() != nil:
				sum += m.GetUntyped().GetValue()
			}
		}
	}
	return sum
}
