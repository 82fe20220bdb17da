// Package limitertest builds, for tests, the decision service on a real
// Redis as cmd/limiter assembles it: a limiter.Service deciding through a
// redisstore.Coalescer, whose errors it reads as redisstore classifies
// them.
package limitertest

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Options are what the tests vary in the service. Every field may be left
// zero.
type Options struct {
	// Limiter is the service's configuration: instance, over-limit cache,
	// outcome publisher, bans, leases...
	Limiter limiter.Config
	// Coalesce configures the coalescer, as REDIS_PIPELINES,
	// PIPELINE_*, REDIS_TIMEOUT... do in cmd/limiter.
	Coalesce redisstore.CoalesceConfig
	// Events receives the decision events; nil: they are discarded.
	Events limiter.Publisher
	// Log and Registerer default to zap.NewNop() and a registry of the
	// service's own.
	Log        *zap.Logger
	Registerer prometheus.Registerer
	// Wrap, when set, wraps the coalescer's Decide (to count or hold the
	// submissions); the errors still read as the coalescer's.
	Wrap func(limiter.Decider) limiter.Decider
}

// Service returns a Service deciding the rules of set (nil: none, until
// SetRules) on store, through a coalescer closed when tb ends. It is not
// started: a test that needs its health checks or lease renewals calls
// Start, and Stop in a cleanup registered after this call.
func Service(tb testing.TB, store *redisstore.Store, set *rules.Set, o Options) *limiter.Service {
	tb.Helper()
	coalescer := redisstore.NewCoalescer(store, o.Coalesce)
	tb.Cleanup(coalescer.Close)
	var backend limiter.Backend = coalescer
	if o.Wrap != nil {
		backend = wrapped{Backend: coalescer, decider: o.Wrap(coalescer)}
	}
	if o.Events == nil {
		o.Events = discard{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	return limiter.New(o.Limiter, set, backend, o.Events, o.Log, o.Registerer)
}

// wrapped decides through decider and reads errors as Backend does. It
// embeds the interface, not the coalescer, so that the coalescer's
// DecideInto is not promoted: the service would call it and bypass the
// wrapper.
type wrapped struct {
	limiter.Backend
	decider limiter.Decider
}

func (w wrapped) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	return w.decider.Decide(ctx, calls)
}

// discard drops every event.
type discard struct{}

func (discard) Publish(_, _ []byte) bool { return true }
