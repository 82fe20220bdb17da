package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestGiveBackRandom interleaves give-backs of earlier admitted calls, in
// random order and at random later times (clock jumps both ways, pauses
// past every window and lease slot), with the decisions of random rules of
// every algorithm, with and without holds, leased or not, through the
// scripts and the model: decisions and the units given back must be
// identical. Each decision makes the keys persistent (as TestDecideRandom),
// and a give-back sets no expiry.
func TestGiveBackRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 160
	if testing.Short() {
		sequences = 24
	}
	var given, kept int
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(61, uint64(seq)))
		rule := randomRule(rng)
		if seq%3 == 2 && rule.Algorithm != decide.SlidingWindow {
			rule.Leased, rule.Penalty, rule.Escalations = true, 0, nil
		}
		if rule.Counted() { // counted calls keep a counter per window: TestGiveBackAsIfNeverMade
			rule.Penalty = 1500 * time.Millisecond
		}
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		g, k := compareGiveBacks(t, client, store, seq, rule, decidetest.Keys(prefix, "gb"+strconv.Itoa(seq)), 80, rng, func(c *decide.Call) {
			now = nextNow(rng, now)
			c.NowMs, c.Cost = now, randomCost(rng)
			if c.Leased {
				c.Lease.Ask = rng.Int64N(5)
			}
		})
		given, kept = given+g, kept+k
	}
	requireBoth(t, given, kept)
}

// requireBoth fails unless some give-backs gave units back and some gave
// none: a random test that never reached one of them proves nothing of it.
func requireBoth(t *testing.T, given, kept int) {
	t.Helper()
	t.Logf("%d give-backs gave units back, %d gave none", given, kept)
	if given == 0 || kept == 0 {
		t.Errorf("%d give-backs gave units back, %d gave none: want some of each", given, kept)
	}
}

// TestGiveBackSlidingRandom is TestGiveBackRandom on long sliding window
// logs: give-backs of members with none, a few and more than
// decide.MaxGiveBackShift members after them, totals that wrap 2^53.
func TestGiveBackSlidingRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 40
	if testing.Short() {
		sequences = 8
	}
	var given, kept int
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(67, uint64(seq)))
		rule := randomSlidingRule(rng)
		var maxPer int64
		for _, l := range rule.Limits {
			maxPer = max(maxPer, l.Per.Milliseconds())
		}
		clock := slidingClock(rng, 1_000_000+rng.Int64N(1_000_000_000), maxPer)
		g, k := compareGiveBacks(t, client, store, seq, rule, decidetest.Keys(prefix, "gbsw"+strconv.Itoa(seq)), 300, rng, func(c *decide.Call) {
			c.NowMs, c.Cost = clock(), slidingCost(rng, rule.Limits, seq%2 == 0)
		})
		given, kept = given+g, kept+k
	}
	requireBoth(t, given, kept)
}

// compareGiveBacks runs steps steps on keys: mostly a call of rule, as step
// sets it, decided by the leanest script and the model; one time in four a
// give-back of an earlier admitted call, each given back once, at the time
// of the last call, by give_back.lua and the model. It fails at the first
// difference, with the model's history, and returns how many give-backs
// gave units back and how many gave none.
func compareGiveBacks(t *testing.T, client *redis.Client, store *Store, seq int, rule decide.Call, keys decide.Keys, steps int,
	rng *rand.Rand, step func(*decide.Call)) (given, kept int) {
	t.Helper()
	ctx := context.Background()
	model := decide.NewMemory()
	var history strings.Builder
	var admitted []decide.GiveBack
	var now int64
	for i := range steps {
		if len(admitted) > 0 && rng.IntN(4) == 0 {
			j := rng.IntN(len(admitted))
			g := admitted[j]
			admitted = slices.Delete(admitted, j, j+1)
			got, errs := store.giveBack(ctx, []decide.GiveBack{g}, now)
			if errs != nil {
				t.Fatalf("sequence %d step %d: give-back: %v", seq, i, errs[0])
			}
			want := model.GiveBack(g, now)
			fmt.Fprintf(&history, "  give back at %d the call of %d (units %d) -> %d\n", now, g.Result.At, g.Units(), want)
			if got[0] != want {
				t.Fatalf("sequence %d step %d (key %s): give-back of the call at %d: redis %d units, model %d\nrule %+v\nhistory (model):\n%s",
					seq, i, keys.State, g.Result.At, got[0], want, rule, history.String())
			}
			if want > 0 {
				given++
			} else {
				kept++
			}
			continue
		}
		c := rule
		c.Keys = keys
		step(&c)
		now = c.NowMs
		got, err := decidePersistent(ctx, client, store.scriptOf, c)
		if err != nil {
			t.Fatalf("sequence %d step %d: %v", seq, i, err)
		}
		ref := model.Decide(c, 0)
		fmt.Fprintf(&history, "  now %d cost %d ask %d -> %+v\n", c.NowMs, c.Cost, c.Lease.Ask, ref)
		if got != ref {
			t.Fatalf("sequence %d step %d (key %s): redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
				seq, i, keys.State, rule, got, history.String())
		}
		if g, ok := decide.GiveBackOf(c, got); ok {
			admitted = append(admitted, g)
		}
	}
	return given, kept
}

// giveBackCase is a key's calls of cost 1 at before (ms after an hour's
// start), a call x of xCost (asking ask more units when leased), calls of
// cost 1 at after, the give-back of x at back, then calls of cost 1 at
// drain until one is denied.
type giveBackCase struct {
	name          string
	rule          decide.Call
	before, after []int64
	x, xCost, ask int64
	back, drain   int64
	// want is the units given back; -1: all of x's (its cost and grant).
	want int64
	// gone: the give-back finds x's window or member gone, so the key
	// decides as the same key without the give-back; else as the same key
	// without x.
	gone bool
}

// TestGiveBackAsIfNeverMade decides, on real Redis, a sequence with a
// call x on one key and gives x back; a second key goes through the same
// sequence without x (or, where x's window or slot is gone, with x but
// without the give-back). From then on the two keys must decide alike:
// the give-back leaves the key as if x had never been made, or changes
// nothing.
func TestGiveBackAsIfNeverMade(t *testing.T) {
	_, store, prefix := differentialEnv(t)
	ctx := context.Background()
	window := func(requests int64, per time.Duration) decide.Limit {
		return decide.Limit{Requests: requests, Per: per}
	}
	bucket := func(rate int64, per time.Duration, burst int64) decide.Limit {
		return decide.Limit{Rate: rate, Per: per, Burst: burst}
	}
	fixed := decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(5, time.Minute)}}
	fixedHeld := fixed
	fixedHeld.Penalty = time.Second
	fixedHeld.Escalations = []decide.Escalation{{Triggers: 1, Within: time.Minute, Penalty: time.Minute}}
	fixedTwo := decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(5, time.Minute), window(3, time.Second)}}
	fixedSecond := decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(5, time.Second), window(9, time.Minute)}}
	counted := decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(5, time.Second)}}
	log := decide.Call{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{window(6, time.Second)}}
	logTwo := decide.Call{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{window(6, time.Second), window(8, time.Minute)},
		Penalty: time.Second}
	counter := decide.Call{Algorithm: decide.SlidingWindowCounter, Limits: []decide.Limit{window(5, time.Second)}}
	counterTwo := decide.Call{Algorithm: decide.SlidingWindowCounter, Limits: []decide.Limit{window(5, time.Second), window(7, time.Minute)}}
	tb := decide.Call{Algorithm: decide.TokenBucket, Limits: []decide.Limit{bucket(1, time.Second, 5)}}
	tbTwo := decide.Call{Algorithm: decide.TokenBucket, Limits: []decide.Limit{bucket(1, time.Second, 8), bucket(2, time.Minute, 8)},
		Escalations: []decide.Escalation{{Triggers: 2, Within: time.Minute, Penalty: time.Minute}}}
	leased := func(c decide.Call) decide.Call {
		c.Leased = true
		return c
	}
	tbSlow := decide.Call{Algorithm: decide.TokenBucket, Limits: []decide.Limit{bucket(1, time.Minute, 10)}}
	cases := []giveBackCase{
		{name: "fixed window with holds", rule: fixedHeld, before: []int64{0, 1}, x: 2, xCost: 2, after: []int64{3}, back: 4, drain: 5, want: -1},
		{name: "fixed window two limits", rule: fixedTwo, before: []int64{0}, x: 2, xCost: 1, after: []int64{3}, back: 4, drain: 5, want: -1},
		{name: "fixed window, the short one turned", rule: fixedSecond, before: []int64{0}, x: 100, xCost: 2, after: []int64{1100}, back: 1200, drain: 1300, want: 2},
		{name: "fixed window turned", rule: fixedHeld, before: []int64{0}, x: 100, xCost: 2, after: []int64{60_100}, back: 60_200, drain: 60_300, want: 0, gone: true},
		{name: "counted", rule: counted, before: []int64{0, 1}, x: 2, xCost: 2, after: []int64{3}, back: 4, drain: 5, want: -1},
		{name: "counted, the window turned", rule: counted, before: []int64{0}, x: 2, xCost: 2, after: []int64{1100}, back: 1200, drain: 1300, want: 2, gone: true},
		{name: "sliding log, later members", rule: log, before: []int64{0}, x: 10, xCost: 2, after: []int64{20, 30, 30}, back: 40, drain: 50, want: -1},
		{name: "sliding log, two limits, x newest", rule: logTwo, before: []int64{0}, x: 10, xCost: 3, back: 40, drain: 50, want: -1},
		{name: "sliding log, x out of every window", rule: log, before: []int64{0}, x: 10, xCost: 2, after: []int64{1500}, back: 1600, drain: 1700, want: 0, gone: true},
		{name: "counter, current window", rule: counter, before: []int64{0}, x: 100, xCost: 2, after: []int64{300}, back: 400, drain: 500, want: -1},
		{name: "counter, previous window", rule: counterTwo, before: []int64{0}, x: 100, xCost: 2, after: []int64{1100}, back: 1200, drain: 1300, want: -1},
		{name: "counter, two windows on", rule: counter, before: []int64{0}, x: 100, xCost: 2, after: []int64{2100}, back: 2200, drain: 2300, want: 0, gone: true},
		{name: "token bucket", rule: tb, before: []int64{0}, x: 10, xCost: 2, after: []int64{20}, back: 30, drain: 30, want: -1},
		{name: "token bucket two limits, refilled", rule: tbTwo, before: []int64{0, 0}, x: 10, xCost: 3, after: []int64{20}, back: 2500, drain: 2600, want: -1},
		{name: "leased fixed window", rule: leased(fixed), before: []int64{0}, x: 10, xCost: 1, ask: 2, after: []int64{20}, back: 30, drain: 40, want: -1},
		{name: "leased counter", rule: leased(counterTwo), before: []int64{0}, x: 10, xCost: 1, ask: 1, after: []int64{20}, back: 30, drain: 40, want: -1},
		{name: "leased token bucket", rule: leased(tbSlow), before: []int64{0}, x: 10, xCost: 1, ask: 3, after: []int64{20}, back: 30, drain: 40, want: -1},
		{name: "leased token bucket, a later slot", rule: leased(tbSlow), before: []int64{0}, x: 10, xCost: 1, ask: 3, after: []int64{20}, back: 5100, drain: 5200, want: -1},
	}
	hour := int64(time.Hour / time.Millisecond)
	t0 := (1_000_000_000/hour + 1) * hour // an hour's start: every window and slot starts there
	for n, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			call := func(key string, at, cost, ask int64) decide.Call {
				c := tc.rule
				c.Keys, c.NowMs, c.Cost = decidetest.Keys(prefix, key+strconv.Itoa(n)), t0+at, cost
				if c.Leased {
					c.Lease = decide.Lease{Ask: ask}
				}
				return c
			}
			decideAt := func(key string, at, cost, ask int64) decide.Result {
				t.Helper()
				r, err := store.Decide(ctx, []decide.Call{call(key, at, cost, ask)})
				if err != nil {
					t.Fatal(err)
				}
				return r[0]
			}
			var g decide.GiveBack
			for _, key := range []string{"given", "other"} {
				for _, at := range tc.before {
					decideAt(key, at, 1, 0)
				}
				if key == "given" || tc.gone {
					r := decideAt(key, tc.x, tc.xCost, tc.ask)
					if key == "given" {
						var ok bool
						if g, ok = decide.GiveBackOf(call(key, tc.x, tc.xCost, tc.ask), r); !ok || r.At != t0+tc.x {
							t.Fatalf("x: %+v, nothing to give back", r)
						}
						if tc.ask > 0 && r.Granted == 0 {
							t.Fatalf("x: %+v: nothing lent", r)
						}
					}
				}
				for _, at := range tc.after {
					decideAt(key, at, 1, 0)
				}
			}
			got, errs := store.giveBack(ctx, []decide.GiveBack{g}, t0+tc.back)
			if errs != nil {
				t.Fatal(errs[0])
			}
			if want := tc.want; (want < 0 && got[0] != g.Units()) || (want >= 0 && got[0] != want) {
				t.Errorf("gave back %d units of %d, want %d (-1: all)", got[0], g.Units(), want)
			}
			for i := 0; ; i++ {
				a, b := decideAt("given", tc.drain, 1, 0), decideAt("other", tc.drain, 1, 0)
				if a != b {
					t.Fatalf("call %d after the give-back: %+v, without x %+v", i, a, b)
				}
				if !a.Allowed || i > 50 {
					if i == 0 {
						t.Errorf("nothing admitted after the give-back: the case proves nothing")
					}
					break
				}
			}
		})
	}
}

// TestGiveBackLogShift gives back a sliding window log's member with
// decide.MaxGiveBackShift members after it: the log becomes, member for
// member, that of a key that never had the call; with one member more
// after it, nothing is given back and the log is left as it was.
func TestGiveBackLogShift(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	t0 := int64(2_000_000_000)
	for _, tc := range []struct {
		later int
		want  int64
	}{{decide.MaxGiveBackShift, 3}, {decide.MaxGiveBackShift + 1, 0}} {
		t.Run(strconv.Itoa(tc.later), func(t *testing.T) {
			rule := decide.Call{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{{Requests: 1000, Per: time.Minute}}}
			var g decide.GiveBack
			var calls []decide.Call // the given key's
			logs := map[string][]redis.Z{}
			for _, key := range []string{"given", "other"} {
				c := rule
				c.Keys = decidetest.Keys(prefix, key+strconv.Itoa(tc.later))
				decideAt := func(at, cost int64) decide.Result {
					c.NowMs, c.Cost = t0+at, cost
					if key == "given" {
						calls = append(calls, c)
					}
					r, err := store.Decide(ctx, []decide.Call{c})
					if err != nil || !r[0].Allowed {
						t.Fatalf("%+v, %v", r, err)
					}
					return r[0]
				}
				decideAt(0, 2)
				if key == "given" {
					g, _ = decide.GiveBackOf(c, decideAt(1, 3))
				}
				for i := range tc.later {
					decideAt(int64(2+i), 1+int64(i%3))
				}
				logs[key] = client.ZRangeWithScores(ctx, c.Keys.State, 0, -1).Val()
			}
			got, errs := store.giveBack(ctx, []decide.GiveBack{g}, t0+100)
			if errs != nil {
				t.Fatal(errs[0])
			}
			if got[0] != tc.want {
				t.Fatalf("gave back %d units, want %d", got[0], tc.want)
			}
			after := client.ZRangeWithScores(ctx, g.Call.Keys.State, 0, -1).Val()
			want := logs["other"] // as if never made
			if tc.want == 0 {
				want = logs["given"] // untouched
			}
			if !slices.Equal(after, want) {
				t.Errorf("log after the give-back\n %v\nwant\n %v", after, want)
			}
			if ttl := client.PTTL(ctx, g.Call.Keys.State).Val(); ttl <= 0 {
				t.Errorf("the log lost its expiry: %v", ttl)
			}
			model := decide.NewMemory() // the model agrees
			for _, c := range calls {
				model.Decide(c, 0)
			}
			if n := model.GiveBack(g, t0+100); n != tc.want {
				t.Errorf("model gave back %d units, want %d", n, tc.want)
			}
		})
	}
}

// TestGiveBackSentOnce loses the reply of a give-back after the server ran
// it, cutting the connection: go-redis must not send it again, so the key
// is given its units back once, not the units of another call too.
func TestGiveBackSentOnce(t *testing.T) {
	proxy := redistest.StartSlowProxy(t, redisAddr())
	store := New(connect(t, proxy.Addr()))
	prefix := testPrefix(t, newClient(t, redisAddr()))
	ctx := context.Background()
	const limit = 10
	rule := decide.Call{Algorithm: decide.FixedWindow, Keys: decidetest.Keys(prefix, "once"), Penalty: time.Second,
		Limits: []decide.Limit{{Requests: limit, Per: time.Hour}}, NowMs: time.Now().Truncate(time.Hour).Add(time.Minute).UnixMilli()}
	decideOne := func(cost int64) decide.Result {
		c := rule
		c.Cost = cost
		r, err := store.Decide(ctx, []decide.Call{c})
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	decideOne(4)
	x := rule
	x.Cost = 3
	g, ok := decide.GiveBackOf(x, decideOne(3))
	if !ok {
		t.Fatal("x denied")
	}
	proxy.LoseReply(0) // the give-back's reply
	if _, errs := store.giveBack(ctx, []decide.GiveBack{g}, rule.NowMs); errs == nil {
		t.Fatal("the give-back's reply was not lost")
	}
	if proxy.Lost() == 0 {
		t.Fatal("no reply was lost")
	}
	admitted := int64(4)
	for decideOne(1).Allowed && admitted <= 2*limit {
		admitted++
	}
	if admitted != limit {
		t.Errorf("%d admitted of a limit of %d: want exactly the limit (the give-back ran once)", admitted, limit)
	}
}

// TestGiveBackNothing: a denial, a probe and a call of cost 0 given
// nothing have nothing to give back: nothing is sent, the key and the
// model are untouched; an invalid call fails alone.
func TestGiveBackNothing(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	rule := decide.Call{Algorithm: decide.FixedWindow, Keys: decidetest.Keys(prefix, "nothing"), Penalty: time.Second,
		Limits: []decide.Limit{{Requests: 2, Per: time.Hour}}, NowMs: 3_600_000_000, Cost: 2}
	model := decide.NewMemory()
	r, err := store.Decide(ctx, []decide.Call{rule})
	if err != nil || !r[0].Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	model.Decide(rule, 0)
	denied, probe, free := rule, rule, rule
	probe.Probe, probe.Penalty = true, 0
	free.Cost = 0
	invalid := rule
	invalid.Limits = nil
	allowed := decide.Result{Allowed: true, At: rule.NowMs}
	gs := []decide.GiveBack{
		{Call: denied, Result: decide.Result{At: rule.NowMs}},
		{Call: probe, Result: allowed},
		{Call: free, Result: allowed},
		{Call: invalid, Result: allowed},
	}
	units, errs := store.giveBack(ctx, gs, rule.NowMs)
	if errs == nil || errs[3] == nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v: want the invalid call's alone", errs)
	}
	for i, g := range gs[:3] {
		if units[i] != 0 || model.GiveBack(g, rule.NowMs) != 0 {
			t.Errorf("give-back %d: %d units given back, want none", i, units[i])
		}
	}
	if c := client.HGet(ctx, rule.Keys.State, "c:3600000").Val(); c != "2" {
		t.Errorf("count %q after give-backs of nothing, want 2", c)
	}
}
