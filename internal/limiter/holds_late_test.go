package limiter

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// lateDecider answers every submission late: Redis may have run it.
type lateDecider struct{ late *lateReply }

func (l lateDecider) Decide(context.Context, []decide.Call) ([]decide.Result, error) {
	return nil, l.late
}

// A concurrency take whose reply comes late, in a request that is admitted
// without a hold (on_redis_failure allow, or a shadow rule refused by the
// local fallback), answers no hold id: nobody can release what Redis took
// for it, so its late take must go back, or the slot stays taken for the
// hold lifetime.
func TestLateTakeOfAnAdmittedRequestWithoutHoldGoesBack(t *testing.T) {
	set := compileRules(t, `
rules:
  - {id: allow, match: {endpoints: ["/allow"]}, key: [ip], algorithm: concurrency,
     limits: [{concurrent: 2, hold: 10m}], on_redis_failure: allow}
  - {id: shadow, match: {endpoints: ["/shadow"]}, key: [ip], algorithm: concurrency, shadow: true,
     limits: [{concurrent: 2, hold: 10m}], on_redis_failure: local}
`)
	late := &lateReply{}
	svc := New(Config{Instance: "test"}, set, fakeErrors{Backend: OpaqueErrors(lateDecider{late})},
		nopPublisher{}, zap.NewNop(), prometheus.NewRegistry())
	for _, ep := range []string{"/allow", "/shadow"} {
		d := new(Decision)
		svc.Check(context.Background(), &rules.Request{IP: "192.0.2.9", Endpoint: ep, Method: "GET", Cost: 1}, d)
		if !d.Allowed || d.Hold != "" {
			t.Fatalf("%s: allowed %v hold %q, want admitted without a hold", ep, d.Allowed, d.Hold)
		}
		if got, want := late.take(), [][3]int{{0, 1, 0}}; !slices.Equal(got, want) {
			t.Errorf("%s: settled %v, want %v: the late take holds a slot no report can release", ep, got, want)
		}
	}
}
