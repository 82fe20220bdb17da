package decidetest

import (
	"math/rand/v2"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Holder plays one limiter holding a lease on a key, as the limiter does:
// it admits from the lease while it lasts, and otherwise sends a leased
// call that settles what it spent and asks for more. Times are the
// server's (ms).
type Holder struct {
	Until   int64 // the lease's deadline; 0: none
	Unspent int64 // units left in it
	Spent   int64 // units admitted from it since it was last settled
}

// Spend admits cost units from the lease at now, if it lasts and holds
// them.
func (h *Holder) Spend(now, cost int64) bool {
	if now >= h.Until {
		*h = Holder{}
		return false
	}
	if h.Unspent < cost {
		return false
	}
	h.Unspent -= cost
	h.Spent += cost
	return true
}

// Lease returns what a call sent at now asks: it settles the units spent
// and gives back the unspent ones when giveBack.
func (h *Holder) Lease(now, ask int64, giveBack bool) decide.Lease {
	if now >= h.Until {
		*h = Holder{}
	}
	l := decide.Lease{Ask: ask, Until: h.Until, Spent: h.Spent}
	if giveBack {
		l.Unspent = h.Unspent
	}
	return l
}

// Settle records the answer r to a call that asked l at now.
func (h *Holder) Settle(now int64, l decide.Lease, r decide.Result) {
	h.Spent -= l.Spent
	h.Unspent -= l.Unspent
	if now >= h.Until {
		*h = Holder{}
	}
	if r.Granted == 0 {
		return
	}
	if r.LeaseUntil != h.Until { // a new window or slot: the old units lapsed
		*h = Holder{Until: r.LeaseUntil}
	}
	h.Unspent += r.Granted
}

// Admission is one request admitted at a time (ms) for a cost.
type Admission struct{ At, Cost int64 }

// LeaseStep is one request of a random lease sequence: which holder, when,
// its cost, what it asks, whether it only gives back its lease.
type LeaseStep struct {
	Holder         int
	Now, Cost, Ask int64
	GiveBack       bool
}

// RandomLeaseSteps returns n requests of holders limiters on a key, in
// time order from start: bursts at one instant, small steps, window-long
// jumps now and then, and give-backs.
func RandomLeaseSteps(rng *rand.Rand, holders, n int, start int64) []LeaseStep {
	steps := make([]LeaseStep, n)
	now := start
	for i := range steps {
		switch r := rng.IntN(20); {
		case r == 0:
			now += 1000 + rng.Int64N(3000)
		case r < 8:
		default:
			now += rng.Int64N(60)
		}
		s := LeaseStep{Holder: rng.IntN(holders), Now: now, Cost: 1, Ask: rng.Int64N(12)}
		switch r := rng.IntN(12); {
		case r == 0:
			s.Cost = 0
		case r == 1:
			s.Cost = 1 + rng.Int64N(6)
		case r == 2:
			s.Cost, s.Ask, s.GiveBack = 0, 0, true
		}
		steps[i] = s
	}
	return steps
}

// RandomLeaseRule returns a leasable rule: one or two limits (of distinct
// pers, as rules have) of the fixed window, the sliding window counter or
// the token bucket, a quarter of them debiting denied calls.
func RandomLeaseRule(rng *rand.Rand) decide.Call {
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	pers := []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 5 * time.Second}
	c := decide.Call{Algorithm: algs[rng.IntN(len(algs))], Leased: true, DebitDenied: rng.IntN(4) == 0}
	for i := range 1 + rng.IntN(2) {
		l := decide.Limit{Per: pers[rng.IntN(len(pers))] + time.Duration(i)*7*time.Second}
		if c.Algorithm == decide.TokenBucket {
			l.Rate, l.Burst = 1+rng.Int64N(40), 1+rng.Int64N(60)
		} else {
			l.Requests = 1 + rng.Int64N(80)
		}
		c.Limits = append(c.Limits, l)
	}
	return c
}
