package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// ctxDecider records what the context it gets says during Decide.
type ctxDecider struct {
	fakeDecider
	err      error
	done     bool
	deadline bool
	value    any
}

type ctxKey struct{}

func (c *ctxDecider) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	c.err, c.done, c.value = ctx.Err(), ctx.Done() != nil, ctx.Value(ctxKey{})
	_, c.deadline = ctx.Deadline()
	return c.fakeDecider.Decide(ctx, calls)
}

// A request whose client hung up is still decided: the Decider's context is
// the request's without its cancellation (context.WithoutCancel's), with
// its values.
func TestDeciderContextIsDetached(t *testing.T) {
	dec := &ctxDecider{}
	svc := New(Config{Instance: "test"}, compileRules(t, modeRules), OpaqueErrors(dec), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), ctxKey{}, "v"), time.Now().Add(time.Hour))
	cancel()
	var d Decision
	svc.Check(ctx, &rules.Request{IP: "203.0.113.7", Endpoint: "/local", Method: "GET", Cost: 1}, &d)
	if len(d.Applied) == 0 || !d.Allowed || d.Mode != ModeRedis {
		t.Fatalf("decision %+v", d)
	}
	if dec.err != nil || dec.done || dec.deadline || dec.value != "v" {
		t.Errorf("Decider's context: Err %v, Done set %v, deadline %v, value %v; want nil, false, false, v", dec.err, dec.done, dec.deadline, dec.value)
	}
	if d.detached.parent != nil {
		t.Error("the decision keeps the request's context after Check")
	}
}
