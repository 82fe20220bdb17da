package limiter

import (
	"context"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Decider decides calls against shared state (Redis), all in one round trip.
// It must bound its own time: the context it gets carries no deadline and
// is never cancelled. The context must not be used after Decide returns
// (the decision reuses it).
type Decider interface {
	Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error)
}

// decidesInto is implemented by Deciders that can write the results into
// the caller's slice (results[:len(calls)]), which the decision reuses,
// rather than return a new one; redisstore.Coalescer does.
type decidesInto interface {
	DecideInto(ctx context.Context, calls []decide.Call, results []decide.Result) error
}

// Backend is the shared store the Service decides with (Redis, through
// redisstore.Coalescer) together with how its errors read. What a failure
// means decides the metric it feeds, the failure policy a local rule may
// apply and whether the mode leaves redis, and only the store can tell
// its errors apart. OpaqueErrors makes a Backend of a Decider that says
// nothing of its errors.
type Backend interface {
	Decider
	// ErrorClass maps an error of Decide, or of Config.Health (which asks
	// the same Redis), to a bounded metric label.
	ErrorClass(err error) string
	// ErrorClasses lists every label ErrorClass can return: their series
	// start at 0.
	ErrorClasses() []string
	// Unreached reports whether an error of Decide means that the calls
	// never reached Redis (a refused connection, a node known to be down):
	// nothing was counted, so rules whose on_redis_failure is local may
	// decide them in memory. Any other failure, a timeout above all, leaves
	// the outcome unknown: the round trip may have run and counted, and
	// admitting the request on a local budget could pass the limit while
	// Redis still counts for the other instances. A local rule then refuses
	// the request (see refused).
	Unreached(err error) bool
	// BreakerOpen reports whether an error of Decide says the breaker is
	// open: Redis (every node a call needed, the failure not partial)
	// failed round trip after round trip and was found down, so the mode
	// leaves redis at once and decisions stop calling it until the health
	// checks bring it back. The Backend's breaker is the only one: it sees
	// each node's round trips and tells a slow node from a dead one.
	BreakerOpen(err error) bool
}

// OpaqueErrors makes a Backend of d whose errors say nothing: each is of
// class "other", leaves the outcome unknown (never Unreached) and never
// says a breaker is open. It suits a Decider that is no store (fixed
// answers, a test's fake). The Service decides through d.Decide only,
// even when d could write into its results (DecideInto).
func OpaqueErrors(d Decider) Backend { return opaqueErrors{d} }

type opaqueErrors struct{ Decider }

func (opaqueErrors) ErrorClass(error) string { return "other" }
func (opaqueErrors) ErrorClasses() []string  { return []string{"other"} }
func (opaqueErrors) Unreached(error) bool    { return false }
func (opaqueErrors) BreakerOpen(error) bool  { return false }
