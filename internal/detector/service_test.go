package detector

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// The ban and warning counts have a series at 0 for every reason the
// detection settings can produce, before any event.
func TestReasonSeriesStartAtZero(t *testing.T) {
	det := rules.Detection{
		Warn: &rules.WarnPolicy{Violations: 20, Within: rules.Duration(5 * time.Minute)},
		Ban: []rules.BanPolicy{
			{Violations: 100, Within: rules.Duration(time.Hour), Duration: rules.Duration(time.Hour)},
			{Violations: 30, Within: rules.Duration(time.Minute), Duration: rules.Duration(10 * time.Minute)},
		},
		Scan: &rules.ScanPolicy{DistinctEndpoints: 50, Within: rules.Duration(10 * time.Second), Duration: rules.Duration(time.Hour)},
	}
	reg := prometheus.NewRegistry()
	New(abuse.NewEngine(abuse.Config{Detection: det}, nil, nil, nil), zap.NewNop(), reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && m.GetCounter().GetValue() == 0 {
					got[f.GetName()] = append(got[f.GetName()], l.GetValue())
				}
			}
		}
		slices.Sort(got[f.GetName()])
	}
	want := map[string][]string{
		"rate_limit_detector_bans_total":     {"scan", "violations_1h", "violations_1m"},
		"rate_limit_detector_warnings_total": {"violations_5m"},
	}
	for family, reasons := range want {
		if !slices.Equal(got[family], reasons) {
			t.Errorf("%s reasons at 0: %q, want %q", family, got[family], reasons)
		}
	}
}

// The invalid-event count has a series at 0 for every field it can name,
// and the future-event count exists, before any event.
func TestEventSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(abuse.NewEngine(abuse.Config{}, nil, nil, nil), zap.NewNop(), reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	future := false
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "rate_limit_detector_invalid_events_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "field" && m.GetCounter().GetValue() == 0 {
						fields = append(fields, l.GetValue())
					}
				}
			case "rate_limit_detector_future_events_total":
				future = m.GetCounter().GetValue() == 0
			}
		}
	}
	slices.Sort(fields)
	want := event.InvalidFields()
	slices.Sort(want)
	if !slices.Equal(fields, want) {
		t.Errorf("invalid-event fields at 0: %q, want %q", fields, want)
	}
	if !future {
		t.Error("no rate_limit_detector_future_events_total at 0")
	}
}
