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

// newService returns the service of sources, failing the test on error.
func newService(t *testing.T, log *zap.Logger, reg prometheus.Registerer, sources ...Source) *Service {
	t.Helper()
	svc, err := New(log, reg, sources...)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// atZero returns, per family, the values of label of the series of source
// that read 0 (label "" lists the families having such a series), sorted.
func atZero(t *testing.T, reg *prometheus.Registry, source, label string) map[string][]string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ofSource bool
			value := ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "source":
					ofSource = l.GetValue() == source
				case label:
					value = l.GetValue()
				}
			}
			zero := m.GetCounter().GetValue() == 0 && m.GetGauge().GetValue() == 0 && m.GetHistogram().GetSampleCount() == 0
			if ofSource && zero && (label == "" || value != "") {
				got[f.GetName()] = append(got[f.GetName()], value)
			}
		}
		slices.Sort(got[f.GetName()])
	}
	return got
}

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
	newService(t, zap.NewNop(), reg, Source{Name: SourceDecisions, Pipeline: DecisionPipeline(abuse.NewEngine(abuse.Config{Detection: det}, nil, nil, nil))})
	got := atZero(t, reg, SourceDecisions, "reason")
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
// and every count of a decision source exists, before any event; the
// outcome counts do not (they cannot move for decisions).
func TestEventSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	newService(t, zap.NewNop(), reg, Source{Name: SourceDecisions, Pipeline: DecisionPipeline(abuse.NewEngine(abuse.Config{}, nil, nil, nil))})
	fields := atZero(t, reg, SourceDecisions, "field")["rate_limit_detector_invalid_events_total"]
	want := event.InvalidFields()
	slices.Sort(want)
	if !slices.Equal(fields, want) {
		t.Errorf("invalid-event fields at 0: %q, want %q", fields, want)
	}
	families := atZero(t, reg, SourceDecisions, "")
	for _, name := range []string{"rate_limit_detector_events_total", "rate_limit_detector_late_events_total",
		"rate_limit_detector_skipped_events_total", "rate_limit_detector_undecodable_events_total",
		"rate_limit_detector_future_events_total", "rate_limit_detector_batch_failures_total",
		"rate_limit_detector_batch_duration_seconds", "rate_limit_detector_consumer_lag"} {
		if _, ok := families[name]; !ok {
			t.Errorf("no %s{source=%q} at 0", name, SourceDecisions)
		}
	}
	if _, ok := families["rate_limit_detector_outcome_failures_total"]; ok {
		t.Errorf("rate_limit_detector_outcome_failures_total has a series for %s", SourceDecisions)
	}
}

// Sources need a name of their own and a pipeline.
func TestNewRefusesBadSources(t *testing.T) {
	p := DecisionPipeline(abuse.NewEngine(abuse.Config{}, nil, nil, nil))
	for name, sources := range map[string][]Source{
		"no name":     {{Topic: "t", Pipeline: p}},
		"same name":   {{Name: "a", Pipeline: p}, {Name: "a", Pipeline: p}},
		"no pipeline": {{Name: "a"}},
	} {
		if _, err := New(zap.NewNop(), prometheus.NewRegistry(), sources...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
