package kafkabus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of rate_limit_events_dropped_total.
const (
	dropQueueFull  = "queue_full"
	dropSendFailed = "send_failed"
	dropClosed     = "closed"
)

type producerMetrics struct {
	published         prometheus.Counter
	droppedQueueFull  prometheus.Counter
	droppedSendFailed prometheus.Counter
	droppedClosed     prometheus.Counter
}

// newProducerMetrics registers the producer's metrics with the const label
// topic, so producers for different topics share one registry. It registers
// by hand rather than with promauto so that a second producer for the same
// topic is an error, not a panic.
func newProducerMetrics(reg prometheus.Registerer, topic string, queueLength func() float64) (*producerMetrics, error) {
	labels := prometheus.Labels{"topic": topic}
	published := prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "rate_limit_events_published_total",
		Help:        "Events acknowledged by the Kafka broker.",
		ConstLabels: labels,
	})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "rate_limit_events_dropped_total",
		Help:        "Events not published, by reason: queue_full, send_failed, closed.",
		ConstLabels: labels,
	}, []string{"reason"})
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "rate_limit_event_queue_length",
		Help:        "Events queued for Kafka or in flight to it.",
		ConstLabels: labels,
	}, queueLength)
	if reg != nil {
		var done []prometheus.Collector
		for _, c := range []prometheus.Collector{published, dropped, queue} {
			if err := reg.Register(c); err != nil {
				for _, d := range done {
					reg.Unregister(d)
				}
				return nil, fmt.Errorf("register kafka producer metrics for topic %q: %w", topic, err)
			}
			done = append(done, c)
		}
	}
	return &producerMetrics{
		published:         published,
		droppedQueueFull:  dropped.WithLabelValues(dropQueueFull),
		droppedSendFailed: dropped.WithLabelValues(dropSendFailed),
		droppedClosed:     dropped.WithLabelValues(dropClosed),
	}, nil
}
