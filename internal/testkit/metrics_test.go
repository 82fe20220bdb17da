package testkit_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

func TestMetricSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := promauto.With(reg)
	drops := f.NewCounterVec(prometheus.CounterOpts{Name: "drops_total", Help: "h"}, []string{"topic", "reason"})
	drops.WithLabelValues("a", "full").Add(2)
	drops.WithLabelValues("a", "closed").Add(3)
	drops.WithLabelValues("b", "full").Add(5)
	f.NewGauge(prometheus.GaugeOpts{Name: "queue", Help: "h"}).Set(7)
	h := f.NewHistogram(prometheus.HistogramOpts{Name: "sizes", Help: "h"})
	h.Observe(1)
	h.Observe(100)
	for _, tc := range []struct {
		name   string
		family string
		labels map[string]string
		want   float64
	}{
		{"every sample", "drops_total", nil, 10},
		{"one label", "drops_total", map[string]string{"topic": "a"}, 5},
		{"every label", "drops_total", map[string]string{"topic": "a", "reason": "closed"}, 3},
		{"no sample matches", "drops_total", map[string]string{"topic": "c"}, 0},
		{"gauge", "queue", nil, 7},
		{"histogram counts observations", "sizes", nil, 2},
		{"no such family", "nothing", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testkit.MetricSum(t, reg, tc.family, tc.labels); got != tc.want {
				t.Errorf("MetricSum(%s, %v) = %v, want %v", tc.family, tc.labels, got, tc.want)
			}
		})
	}
}

func TestWaitFor(t *testing.T) {
	calls := 0
	testkit.WaitFor(t, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("cond called %d times, want 3: WaitFor returns once it holds", calls)
	}
	r := &recorder{TB: t}
	testkit.WaitFor(r, 0, "never", func() bool { return false })
	if !r.failed {
		t.Error("a condition that never holds did not fail the test")
	}
}
