package redisstore

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestCountedScenarios runs the fixed window scenarios that counted calls
// decide (one limit, no holds) through Store.Decide, which counts them
// with INCRBY and refunds the denied: each step must give the scenario's
// result and the model's. Scenarios whose clock goes back are left out:
// counted calls name their window in the key, so an earlier time reads the
// earlier window's counter (see README).
func TestCountedScenarios(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	ran := 0
	for _, s := range decidetest.Scenarios() {
		if !s.Rule.Counted() || countedBackwards(s) {
			continue
		}
		ran++
		t.Run(s.Name, func(t *testing.T) {
			prefix := testPrefix(t, client)
			stepScenario(t, s, decidetest.Keys(prefix, "subject"), decideOne(context.Background(), store))
			redistest.RequireExpiry(t, client, prefix)
		})
	}
	if ran < 3 {
		t.Fatalf("%d scenarios are counted calls, want at least 3", ran)
	}
}

// countedBackwards reports whether s is of counted calls and its clock goes
// back: an earlier time reads the earlier window's counter, where the model
// and the scripts keep the later window.
func countedBackwards(s decidetest.Scenario) bool {
	return s.Rule.Counted() && !slices.IsSortedFunc(s.Steps, func(a, b decidetest.Step) int { return cmp.Compare(a.NowMs, b.NowMs) })
}

// TestCountedRandom runs random fixed windows of one limit (costs 0, 1, a
// few, above the quota; several calls in one ms; long pauses) through
// INCRBY, PEXPIRE and the refund and through the model, and requires
// identical results. The clock never goes back (see TestCountedScenarios).
func TestCountedRandom(t *testing.T) {
	client := newClient(t, redisAddr())
	prefix := testPrefix(t, client)
	sequences := 150
	if testing.Short() {
		sequences = 20
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(61, uint64(seq)))
		rule := randomRule(rng)
		rule.Algorithm, rule.Limits, rule.Penalty, rule.Escalations = decide.FixedWindow, rule.Limits[:1], 0, nil
		keys := decidetest.Keys(prefix, "counted"+strconv.Itoa(seq))
		model := decide.NewMemory()
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		for i := range 60 {
			c := rule
			c.Keys = keys
			now = max(now, nextNow(rng, now))
			c.NowMs, c.Cost = now, randomCost(rng)
			got, err := decideCountedPersistent(context.Background(), client, c)
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			if ref := model.Decide(c, 0); got != ref {
				t.Fatalf("sequence %d step %d (now %d, cost %d, limit %+v): redis %+v, model %+v", seq, i, c.NowMs, c.Cost, c.Limits[0], got, ref)
			}
		}
	}
}

// decideCountedPersistent decides the counted call c as Store.run does, its
// counter made persistent in the same transaction: the model keeps a
// window's count by its own clock (c.NowMs, far from the server's), and a
// counter expiring on the server's clock in between would lose it.
func decideCountedPersistent(ctx context.Context, client *redis.Client, c decide.Call) (decide.Result, error) {
	sc := countedCall(&c)
	var arena []any
	if _, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		_ = pipe.BatchProcess(ctx, sc.commands(ctx, &arena, nil)...)
		pipe.Persist(ctx, sc.key)
		return nil
	}); err != nil {
		return decide.Result{}, err
	}
	r := decide.CountedResult(&c, sc.incr.Val())
	if !r.Allowed && c.Cost > 0 && !c.DebitDenied && !c.Probe {
		if _, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			sc.queueRefund(ctx, pipe)
			pipe.Persist(ctx, sc.key)
			return nil
		}); err != nil {
			return decide.Result{}, err
		}
	}
	return r, nil
}

// TestCountedServerClock: calls without a time are counted in the window of
// the server's clock, not the limiter's, through Store.Decide and the
// Coalescer; the counter expires at the end of the window plus the grace,
// and a refund leaves the count at what was admitted.
func TestCountedServerClock(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	co := NewCoalescer(store, CoalesceConfig{})
	t.Cleanup(co.Close)
	ctx := context.Background()
	for name, decideFn := range map[string]decider{"store": store.Decide, "coalescer": co.Decide} {
		t.Run(name, func(t *testing.T) {
			const per = int64(3_600_000) // an hour: a boundary mid-test is retried
			prefix := testPrefix(t, client)
			for try := 0; ; try++ {
				c := decide.Call{Keys: decidetest.Keys(prefix, "clock"+strconv.Itoa(try)), Algorithm: decide.FixedWindow,
					Limits: []decide.Limit{{Requests: 2, Per: time.Hour}}, Cost: 1}
				before := serverMs(t, client)
				var results []decide.Result
				for range 3 {
					r, err := decideFn(ctx, []decide.Call{c})
					if err != nil {
						t.Fatal(err)
					}
					results = append(results, r[0])
				}
				after := serverMs(t, client)
				if before/per != after/per && try == 0 { // the hour ended in between
					continue
				}
				key := countedKey(c.Keys.State, per, before/per)
				if n, err := client.Get(ctx, key).Int64(); err != nil || n != 2 {
					t.Fatalf("counter %s = %d (%v), want 2: the admitted calls, the denied one refunded", key, n, err)
				}
				ttl := client.PTTL(ctx, key).Val().Milliseconds()
				// at least until the window ends and its spread after that, at
				// most the grace more (and a second for the estimate of the
				// server's clock)
				spread := expirySpread(key, per)
				if left := per - after%per; ttl < left+spread || ttl > per-before%per+countedGrace+spread+1000 {
					t.Errorf("counter expires in %d ms, want the %d ms left of the window plus %d spread plus up to %d", ttl, left, spread, countedGrace)
				}
				if !results[0].Allowed || !results[1].Allowed || results[2].Allowed || results[2].Remaining != 0 {
					t.Errorf("results %+v: want two admitted, the third denied", results)
				}
				return
			}
		})
	}
}

// TestCountedClockRefresh: an estimate older than clockRefresh is sampled
// again by the next round trip that counts a call (or, in Store.Decide,
// before it), so a server clock that stepped (here: an estimate an hour
// off) is followed within a refresh.
func TestCountedClockRefresh(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	clock := new(nodeClock)
	off := serverMs(t, client) + 3_600_000
	clock.last.Store(&clockSample{serverMs: off, at: time.Now().Add(-2 * clockRefresh)})
	calls := []decide.Call{{Keys: decidetest.Keys(prefix, "refresh"), Algorithm: decide.FixedWindow,
		Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}, Cost: 1}}
	results := make([]decide.Result, 1)
	if errs := store.run(context.Background(), clock, nil, calls, results); errs != nil {
		t.Fatal(errs)
	}
	if calls[0].NowMs < off { // this round trip still used the old estimate
		t.Errorf("call placed at %d, want the estimate's %d or later", calls[0].NowMs, off)
	}
	est, age, _ := clock.now()
	if age >= clockRefresh {
		t.Fatalf("estimate is %v old after the round trip: not sampled again", age)
	}
	if d := est - serverMs(t, client); d < -5000 || d > 5000 {
		t.Errorf("estimate is %d ms from the server's clock after the refresh", d)
	}

	// Store.Decide has no round trips of a lane to refresh in: it samples a
	// stale clock before placing the call.
	store.clocks.of("").last.Store(&clockSample{serverMs: off, at: time.Now().Add(-2 * clockRefresh)})
	c := calls[0]
	c.NowMs = 0
	if _, err := store.Decide(context.Background(), []decide.Call{c}); err != nil {
		t.Fatal(err)
	}
	if est, _, _ := store.clocks.of("").now(); est-serverMs(t, client) > 5000 {
		t.Errorf("Store.Decide kept an estimate %d ms ahead of the server's clock", est-serverMs(t, client))
	}
}

// TestCountedSwitch: a fixed window that gains a penalty or a second limit
// moves from its counter to the scripts' state, where its count starts
// anew, and finds the counter's count again when it loses them: the one
// place where a rule's change of features does not carry its count over
// (README, Redis CPU per decision).
func TestCountedSwitch(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	keys := decidetest.Keys(testPrefix(t, client), "switch")
	hour := decide.Limit{Requests: 5, Per: time.Hour}
	now := int64(400 * 3_600_000) // the start of an hour
	steps := []struct {
		limits    []decide.Limit
		penalty   time.Duration
		counted   bool
		remaining int64
	}{
		{[]decide.Limit{hour}, 0, true, 4},
		{[]decide.Limit{hour}, 0, true, 3},
		{[]decide.Limit{hour}, time.Second, false, 4},                        // the script's state: new
		{[]decide.Limit{hour, {Requests: 9, Per: time.Minute}}, 0, false, 3}, // the same state
		{[]decide.Limit{hour}, 0, true, 2},                                   // the counter again
	}
	for i, st := range steps {
		c := decide.Call{Keys: keys, Algorithm: decide.FixedWindow, Limits: st.limits, Cost: 1, Penalty: st.penalty, NowMs: now + int64(i)}
		if c.Counted() != st.counted {
			t.Fatalf("step %d: counted %v, want %v", i, c.Counted(), st.counted)
		}
		r, err := store.Decide(context.Background(), []decide.Call{c})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !r[0].Allowed || r[0].Remaining != st.remaining {
			t.Errorf("step %d: %+v, want admitted with %d remaining", i, r[0], st.remaining)
		}
	}
}

// TestExpirySpread: the counters of one window are kept for different
// times past it, spread evenly over the window (at most maxExpirySpread),
// so Redis does not delete them all at once.
func TestExpirySpread(t *testing.T) {
	for _, tc := range []struct {
		name string
		per  int64 // ms
	}{
		{"second", 1000},
		{"hour, capped", 3_600_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			span := min(tc.per, maxExpirySpread)
			const keys, buckets = 10_000, 10
			var count [buckets]int
			for i := range keys {
				key := countedKey("rl:{ip:203.0.113."+strconv.Itoa(i%250)+"}:"+strconv.Itoa(i), tc.per, 42)
				s := expirySpread(key, tc.per)
				if s < 0 || s >= span {
					t.Fatalf("spread of %s = %d ms, want within [0, %d)", key, s, span)
				}
				if again := expirySpread(key, tc.per); again != s {
					t.Fatalf("spread of %s = %d then %d: want the same from every limiter", key, s, again)
				}
				count[s*buckets/span]++
			}
			// evenly: each tenth of the span holds a tenth of the keys, ±20 %
			for b, n := range count {
				if n < keys/buckets*8/10 || n > keys/buckets*12/10 {
					t.Errorf("tenth %d of the spread holds %d of %d counters, want about %d: %v", b, n, keys, keys/buckets, count)
				}
			}
		})
	}
}

// TestCountedRefundOnceWhenTheReplyIsLost: the refund of a denied counted
// call runs at most once, even when its connection is cut after Redis ran
// it: sent again, it would take the cost back twice, and the window would
// admit that much more than its limit.
func TestCountedRefundOnceWhenTheReplyIsLost(t *testing.T) {
	proxy := redistest.StartSlowProxy(t, redisAddr())
	co := NewCoalescer(New(connect(t, proxy.Addr())), CoalesceConfig{Timeout: 2 * time.Second})
	defer co.Close()
	prefix := testPrefix(t, newClient(t, redisAddr()))
	const limit, denied = 100, 40
	now := time.Now().Truncate(time.Hour).Add(time.Minute).UnixMilli() // within one window
	call := func(cost int64) decide.Call {
		return decide.Call{Algorithm: decide.FixedWindow, Keys: decidetest.Keys(prefix, "refund"), NowMs: now, Cost: cost,
			Limits: []decide.Limit{{Requests: limit, Per: time.Hour}}}
	}
	decideOne := func(c decide.Call) (decide.Result, error) {
		r, err := co.Decide(context.Background(), []decide.Call{c})
		if err != nil {
			return decide.Result{}, err
		}
		return r[0], nil
	}
	if r, err := decideOne(call(limit - 10)); err != nil || !r.Allowed {
		t.Fatalf("%d of %d: %+v, %v", limit-10, limit, r, err)
	}
	proxy.LoseReply(1) // the INCRBY's reply comes back, the refund's is lost
	if r, err := decideOne(call(denied)); err != nil || r.Allowed {
		t.Fatalf("%d more: %+v, %v", denied, r, err)
	}
	if proxy.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	admitted := int64(limit - 10)
	for admitted <= limit+denied {
		r, err := decideOne(call(1))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			break
		}
		admitted++
	}
	if admitted > limit {
		t.Errorf("%d admitted of a limit of %d: the refund of %d ran twice", admitted, limit, denied)
	}
}
