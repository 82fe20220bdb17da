package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Vector is a labelled metric family: *prometheus.CounterVec and the
// other vectors.
type Vector interface {
	prometheus.Collector
	Delete(prometheus.Labels) bool
}

// DeleteSeries deletes the series of vec whose labels drop reports true,
// each by its own labels: one hash lookup each, where a partial match
// (DeletePartialMatch) scans every series of vec per call, minutes of CPU
// to delete the series of 20 000 rules one rule at a time.
func DeleteSeries(vec Vector, drop func(prometheus.Labels) bool) {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	var gone []prometheus.Labels
	for metric := range ch {
		var pb dto.Metric
		if metric.Write(&pb) != nil {
			continue
		}
		labels := make(prometheus.Labels, len(pb.GetLabel()))
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if drop(labels) {
			gone = append(gone, labels)
		}
	}
	for _, labels := range gone { // not while collecting: Collect holds the vector's lock
		vec.Delete(labels)
	}
}
