package rulesync

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The reload counts of the sources in use start at 0; the last-reload gauge
// waits for a load (a 0 there would fire the reload alert).
func TestMetricsStartAtZero(t *testing.T) {
	tests := []struct {
		name         string
		dynamic, rls bool
		reloads      int
	}{
		{"file only", false, false, 3},
		{"file and dynamic", true, false, 6},
		{"file and rls", false, true, 6},
		{"every source", true, true, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			newMetrics(reg, tt.dynamic, tt.rls)
			if n, err := testutil.GatherAndCount(reg, "rate_limit_rules_reloads_total"); err != nil || n != tt.reloads {
				t.Errorf("rate_limit_rules_reloads_total: %d series (%v), want %d", n, err, tt.reloads)
			}
			if n, err := testutil.GatherAndCount(reg, "rate_limit_rules_last_reload_successful"); err != nil || n != 0 {
				t.Errorf("rate_limit_rules_last_reload_successful: %d series (%v) before any load, want none", n, err)
			}
		})
	}
}
