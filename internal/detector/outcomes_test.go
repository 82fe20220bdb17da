package detector

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// A pipeline with a ban check hands it the failures not yet known banned,
// before detection: the outcomes it marks banned feed no ban, the others
// do; its error fails the batch, counted for its source only.
func TestOutcomePipelineChecksBans(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second) // the injected clock: any instant will do
	det := rules.Detection{BruteForce: &rules.BruteForcePolicy{Failures: 3, OutcomeScenario: rules.OutcomeScenario{
		Within: rules.Duration(time.Minute), Duration: rules.Duration(time.Hour)}}}
	pub := &recorder{}
	engine, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: func() time.Time { return now }},
		abusetest.NewMemoryDistinct(), abusetest.NewMemoryLedger(), pub)
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	var down error
	check := func(_ context.Context, outs []*event.Outcome) error {
		if down != nil {
			return down
		}
		for _, o := range outs {
			checked = append(checked, o.EventID)
			o.Banned = o.IP == "203.0.113.1" // the blacklist holds this address
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	svc := newService(t, zap.NewNop(), reg,
		Source{Name: SourceOutcomes, Pipeline: OutcomePipeline(engine, nil, nil)},
		Source{Name: SourceAccessLog, Pipeline: OutcomePipeline(engine, nil, check)})
	outcomes, accessLog := svc.Consumers()[0], svc.Consumers()[1]
	var msgs []event.Message
	add := func(id, ip string, status int, banned bool) {
		o := event.Outcome{EventID: id, TS: now.Add(-time.Second), Instance: "gw-1", IP: ip, Endpoint: "/api/login",
			Method: "POST", Status: status, Banned: banned}
		msgs = append(msgs, event.Message{Topic: "gateway.access", Offset: int64(len(msgs)), Value: o.AppendJSON(nil)})
	}
	for i := range 4 {
		add(fmt.Sprint("a-", i), "203.0.113.1", 401, false) // banned: never counted
		add(fmt.Sprint("b-", i), "203.0.113.2", 401, false) // counted: banned on the 4th
	}
	add("ok", "203.0.113.3", 200, false)   // no failure: not looked up
	add("known", "203.0.113.4", 401, true) // already known banned: not looked up

	down = errors.New("connection refused")
	if err := accessLog.Handle(context.Background(), msgs); !errors.Is(err, down) {
		t.Fatalf("Handle with the check down: %v, want its error", err)
	}
	if n := testutil.ToFloat64(accessLog.metrics.failures); n != 1 {
		t.Errorf("access log batch failures %v, want 1", n)
	}
	if n := testutil.ToFloat64(outcomes.metrics.failures); n != 0 {
		t.Errorf("outcomes batch failures %v, want 0", n)
	}
	down = nil
	if err := accessLog.Handle(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if len(checked) != 8 {
		t.Errorf("checked %q, want the 8 failures not known banned", checked)
	}
	if len(pub.bans) != 1 || pub.bans[0].Subject != "203.0.113.2" || pub.bans[0].Reason != abuse.ReasonBruteForce {
		t.Fatalf("published %+v, want one brute_force ban of 203.0.113.2", pub.bans)
	}
	if n := testutil.ToFloat64(accessLog.metrics.bans.WithLabelValues(abuse.ReasonBruteForce)); n != 1 {
		t.Errorf("access log bans %v, want 1", n)
	}
	if n := testutil.ToFloat64(outcomes.metrics.bans.WithLabelValues(abuse.ReasonBruteForce)); n != 0 {
		t.Errorf("outcomes bans %v, want 0", n)
	}
}
