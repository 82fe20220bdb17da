package lease_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestTableNeverExceeds plays limiters, each with a real Table, leasing one
// key of a random rule from a model of Redis (decide.Memory), and replays
// every request they admitted, at the instant they admitted it, through
// the unleased model: it must admit them all. Unlike decide's
// TestLeaseNeverExceeds, the holders here are Tables, and what happens to
// them is drawn at random too: round trips that take a while (a renewal
// is often out when something else happens), fail or lose their answer;
// rules changes, evictions, idle sweeps and revocations (with notices to
// the other limiters, some lost) during renewals; and every instant in
// microseconds, so that calls are sent and leases spent at any point
// within a millisecond of Redis's clock. Each limiter must also settle
// every unit it spent at most once.
func TestTableNeverExceeds(t *testing.T) {
	sequences := 1000
	if testing.Short() || testkit.RaceDetector {
		sequences = 200
	}
	var admitted, fromLeases, granted, given int64
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(41, uint64(seq)))
		s := newSimulation(rng)
		s.run(400)
		replay := decide.NewMemory()
		plain := s.rule
		plain.Leased, plain.DebitDenied = false, false
		plain.Keys = decidetest.Keys("replay", "k")
		for i, a := range s.log {
			c := plain
			c.NowMs, c.Cost = a.At, a.Cost
			if r := replay.Decide(c, 0); !r.Allowed {
				t.Fatalf("sequence %d: admission %d of %d (at %d ms, cost %d) passes the limit of %+v (%s, debit denied %v, %d limiters)",
					seq, i, len(s.log), a.At, a.Cost, s.rule.Limits, s.rule.Algorithm, s.rule.DebitDenied, len(s.tables))
			}
		}
		for i := range s.tables {
			if s.settled[i] > s.spent[i] {
				t.Fatalf("sequence %d (%s): limiter %d sent %d units to be settled as spent, and spent %d: units were settled twice",
					seq, s.rule.Algorithm, i, s.settled[i], s.spent[i])
			}
		}
		admitted += int64(len(s.log))
		fromLeases += s.fromLeases
		granted += s.granted
		given += s.given
	}
	if fromLeases == 0 || granted == 0 || given == 0 {
		t.Fatalf("%d admissions from leases, %d units lent, %d given back: the test proves nothing", fromLeases, granted, given)
	}
	t.Logf("%d admissions (%d from leases), %d units lent, %d given back", admitted, fromLeases, granted, given)
}

// simulation is one random sequence: limiters (Tables) on one key, Redis
// (the model) and the round trips between them. Time is Redis's, in µs;
// the limiters' clocks read the same.
type simulation struct {
	rng     *rand.Rand
	rule    decide.Call
	bound   int64
	redis   *decide.Memory
	tables  []*lease.Table
	flights flights
	now     int64 // µs
	log     []decidetest.Admission

	fromLeases, granted, given int64
	spent, settled             []int64 // per limiter: units spent from its leases, and units its calls settle as spent
}

// flight is one round trip: a call sent by limiter lim at sent, run by
// Redis at exec, answered at answer (µs), unless its answer is lost
// (the limiter sees a failure; Redis ran the call or not); or a notice.
type flight struct {
	lim                int
	call               decide.Call
	sent, exec, answer int64
	ran, lost, request bool
	settles            bool // a call of Ask or Renewal: its answer goes to Settle or Failed
	notice             bool // not a round trip: limiter lim hears that the key was found past its limit
	result             decide.Result
	at                 int64 // the event's time: exec until run, then answer
}

func newSimulation(rng *rand.Rand) *simulation {
	rule := decidetest.RandomLeaseRule(rng)
	rule.Keys = decidetest.Keys("lease", "k")
	s := &simulation{rng: rng, rule: rule, redis: decide.NewMemory(), now: 1_000_000_000 + rng.Int64N(1_000_000_000)}
	var quota int64
	for i, l := range rule.Limits {
		if q := l.Quota(); i == 0 || q < quota {
			quota = q
		}
	}
	s.bound = max(1, quota/(1+rng.Int64N(8)))
	n := 1 + rng.IntN(3)
	s.spent, s.settled = make([]int64, n), make([]int64, n)
	for range n {
		s.tables = append(s.tables, lease.New(lease.Config{
			Horizon:  time.Duration(10+rng.IntN(1000)) * time.Millisecond,
			MaxKeys:  1, // one key a shard: the keys of the eviction step evict the rule's
			Idle:     time.Duration(20+rng.IntN(500)) * time.Millisecond,
			HotUnits: 2,
		}))
	}
	return s
}

// at is the limiters' clock at t µs.
func at(t int64) time.Time { return time.UnixMicro(t) }

// run plays n steps, then lets every round trip finish.
func (s *simulation) run(n int) {
	for range n {
		s.advance()
		s.settleUntil(s.now)
		s.step(s.rng.IntN(len(s.tables)))
	}
	s.settleUntil(1 << 62)
}

// advance moves the clock on: a little, to around a turn of 500 ms
// (every window and slot ends on one), or by a window or more.
func (s *simulation) advance() {
	switch r := s.rng.IntN(100); {
	case r < 30: // a burst at one instant
	case r < 70:
		s.now += s.rng.Int64N(2000)
	case r < 85:
		turn := (s.now/500_000 + 1) * 500_000
		s.now = max(s.now, turn-1500+s.rng.Int64N(2500))
	case r < 95:
		s.now += 5_000 + s.rng.Int64N(60_000)
	default:
		s.now += 1_000_000 + s.rng.Int64N(3_000_000)
	}
}

// step is one thing limiter i does at s.now.
func (s *simulation) step(i int) {
	tab, now := s.tables[i], at(s.now)
	switch r := s.rng.IntN(100); {
	case r < 80:
		c := s.rule
		c.Cost = 1
		switch r := s.rng.IntN(12); {
		case r == 0:
			c.Cost = 0
		case r == 1:
			c.Cost = 1 + s.rng.Int64N(6)
		}
		res, ok, renew := tab.Take(&c, s.bound, now)
		if ok {
			if res.Allowed && c.Cost > 0 {
				s.log = append(s.log, decidetest.Admission{At: s.now / 1000, Cost: c.Cost})
				s.fromLeases++
			}
			s.spent[i] += c.Cost
			if renew {
				if rc, ok := tab.Renewal(lease.KeyOf(&c), now); ok {
					s.send(i, rc, false, true)
				}
			}
			return
		}
		s.send(i, c, true, tab.Ask(&c, now))
	case r < 88:
		s.giveBack(i, tab.Sweep(now, false))
	case r < 93: // the rule changed
		s.giveBack(i, tab.Drop(now, func(string, []decide.Limit) bool { return false }))
	default: // other keys come: one of them may evict the rule's
		for range 3 {
			c := s.rule
			c.Keys = decidetest.Keys("other", fmt.Sprint(s.rng.IntN(1000)))
			tab.Take(&c, s.bound, now)
		}
	}
}

func (s *simulation) giveBack(i int, calls []decide.Call) {
	for _, c := range calls {
		s.given += c.Lease.Unspent
		s.send(i, c, false, false)
	}
}

// send sends c from limiter i at s.now: Redis runs it now, soon or a while
// later (a renewal is out when the next steps come), and its answer may be
// lost.
func (s *simulation) send(i int, c decide.Call, request, settles bool) {
	delay := func() int64 {
		switch r := s.rng.IntN(10); {
		case r < 4:
			return 0
		case r < 7:
			return s.rng.Int64N(2000)
		case r < 9:
			return 2000 + s.rng.Int64N(80_000)
		}
		return 100_000 + s.rng.Int64N(900_000) // a slow Redis
	}
	s.settled[i] += c.Lease.Spent
	f := &flight{lim: i, call: c, sent: s.now, request: request, settles: settles, lost: s.rng.IntN(20) == 0}
	f.exec = f.sent + delay()
	f.answer = f.exec + delay()
	f.at = f.exec
	heap.Push(&s.flights, f)
}

// settleUntil runs and answers every round trip due by t, in time order.
func (s *simulation) settleUntil(t int64) {
	for len(s.flights) > 0 && s.flights[0].at <= t {
		f := s.flights[0]
		if !f.ran {
			f.ran = true
			if !f.lost || s.rng.IntN(2) == 0 { // a lost answer may or may not have run
				c := f.call
				c.NowMs = f.exec / 1000
				f.result = s.redis.Decide(c, 0)
				if f.request && !f.lost && f.result.Allowed && c.Cost > 0 {
					s.log = append(s.log, decidetest.Admission{At: c.NowMs, Cost: c.Cost})
				}
			}
			f.at = f.answer
			heap.Fix(&s.flights, 0)
			continue
		}
		heap.Pop(&s.flights)
		tab := s.tables[f.lim]
		if f.notice {
			tab.Revoke(f.call.Keys.State, at(f.at))
			continue
		}
		if f.lost {
			if f.settles {
				tab.Failed(&f.call, at(f.answer))
			}
			continue
		}
		if f.settles {
			tab.Settle(&f.call, f.result, at(f.sent))
		}
		// Redis found the key past its limit: the limiter ends its leases
		// and tells the others, who hear of it soon, late or never.
		if f.call.DebitDenied && !f.result.Allowed && tab.Revoke(f.call.Keys.State, at(f.answer)) {
			for j := range s.tables {
				if j != f.lim && s.rng.IntN(3) != 0 {
					n := &flight{lim: j, call: f.call, notice: true, ran: true, at: f.answer + s.rng.Int64N(300_000)}
					heap.Push(&s.flights, n)
				}
			}
		}
		s.granted += f.result.Granted
	}
}

// flights is a heap of round trips by the time of their next event.
type flights []*flight

func (h flights) Len() int { return len(h) }
func (h flights) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].sent < h[j].sent
}
func (h flights) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flights) Push(x any)   { *h = append(*h, x.(*flight)) }
func (h *flights) Pop() any {
	old := *h
	f := old[len(old)-1]
	*h = old[:len(old)-1]
	return f
}
