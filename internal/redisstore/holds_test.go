package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestHoldScenarios runs the concurrency scenarios as runScenarios does.
func TestHoldScenarios(t *testing.T) { runScenarios(t, decidetest.HoldScenarios()) }

// runScenarios runs scenarios through the store's scripts, one call at a
// time and then all at once in pipelines, and through the model: all must
// give the expected results, and every key left must expire.
func runScenarios(t *testing.T, scenarios []decidetest.Scenario) {
	client, store, _ := differentialEnv(t)
	ctx := context.Background()
	for _, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			prefix := testPrefix(t, client)
			stepScenario(t, s, decidetest.Keys(prefix, "subject"), decideOne(ctx, store))
			redistest.RequireExpiry(t, client, prefix)
		})
	}
	t.Run("pipelined", func(t *testing.T) {
		prefix := testPrefix(t, client)
		for i := 0; ; i++ {
			var calls []decide.Call
			var wants []decide.Result
			for n, s := range scenarios {
				if i < len(s.Steps) {
					calls = append(calls, s.Call(decidetest.Keys(prefix, strconv.Itoa(n)), i))
					wants = append(wants, s.Steps[i].Want)
				}
			}
			if len(calls) == 0 {
				break
			}
			got, err := store.Decide(ctx, calls)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			for j := range calls {
				if got[j] != wants[j] {
					t.Errorf("step %d call %d:\n got  %+v\n want %+v", i, j, got[j], wants[j])
				}
			}
		}
	})
}

// TestHoldsRandom runs random sequences of takes (new ids and replays),
// releases (of held, released, lapsed, unknown ids, and of ids held by
// another key), calls of cost 0, give-backs of admitted takes (some twice)
// and rule edits of the limit, on a clock that moves by less than a hold's
// lifetime, lands exactly on lapse times and goes back, through the script
// and the model: every result must be the same. Each decision makes the
// keys persistent, as TestDecideRandom's; a take that adds a hold must
// have set the key to expire no sooner than its latest hold lapses (after
// a clock gone back, an earlier take's), and no other call sets an expiry.
func TestHoldsRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	sequences := 80
	if testing.Short() {
		sequences = 12
	}
	var seen holdOutcomes
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(83, uint64(seq)))
		lives := []time.Duration{3 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, time.Second}
		life := lives[rng.IntN(len(lives))]
		n := 1 + rng.Int64N(4)
		keys := []decide.Keys{decidetest.Keys(prefix, "h"+strconv.Itoa(seq)), decidetest.Keys(prefix, "h"+strconv.Itoa(seq)+"x")}
		model := decide.NewMemory()
		var ids []string            // every id named so far
		var takes []decide.GiveBack // admitted takes
		var history strings.Builder
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		lifeMs := life.Milliseconds()
		for i := range 150 {
			switch p := rng.IntN(100); {
			case p < 10 && len(takes) > 0: // exactly at a hold's lapse, or just before it
				now = takes[rng.IntN(len(takes))].Result.At + lifeMs - rng.Int64N(2)
			case p < 20:
				now -= rng.Int64N(lifeMs + 1)
			case p < 25:
				now += 2*lifeMs + rng.Int64N(lifeMs)
			case p < 70:
				now += rng.Int64N(lifeMs/2 + 1)
			}
			c := decide.Call{Algorithm: decide.Concurrency, Keys: keys[0], NowMs: now, Limits: []decide.Limit{{Requests: n, Per: life}}}
			if rng.IntN(10) == 0 {
				c.Keys = keys[1]
			}
			if rng.IntN(25) == 0 {
				c.Limits[0].Requests = 1 + rng.Int64N(4) // the rule edited, for this call
			}
			known := func() string {
				if len(ids) == 0 {
					return decide.NewHoldID()
				}
				return ids[rng.IntN(len(ids))]
			}
			replay := false
			switch p := rng.IntN(100); {
			case p < 12 && len(takes) > 0:
				j := rng.IntN(len(takes))
				g := takes[j]
				if rng.IntN(2) == 0 { // else it may be given back again
					takes = append(takes[:j], takes[j+1:]...)
				}
				got, errs := store.giveBack(ctx, []decide.GiveBack{g}, now)
				if errs != nil {
					t.Fatalf("sequence %d step %d: give-back: %v", seq, i, errs[0])
				}
				want := model.GiveBack(g, now)
				fmt.Fprintf(&history, "  give back at %d the take at %d on %s -> %d\n", now, g.Result.At, g.Call.Keys.State, want)
				if got[0] != want {
					t.Fatalf("sequence %d step %d: give-back: redis %d, model %d\nhistory (model):\n%s", seq, i, got[0], want, history.String())
				}
				seen.givenBack[min(want, 1)]++
				continue
			case p < 50:
				c.Cost, c.HoldID = 1, decide.NewHoldID()
				ids = append(ids, c.HoldID)
			case p < 60:
				c.Cost, c.HoldID, replay = 1, known(), true
			case p < 85:
				c.Release, c.HoldID = true, known()
			case p < 90:
				c.Release, c.HoldID = true, decide.NewHoldID()
			case p < 95:
				c.HoldID = known() // cost 0 naming a hold: asks the same
			}
			got, ttl, err := decideHoldPersistent(ctx, client, store, c)
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			switch {
			case c.Cost == 1 && !c.Release && !replay && got.Allowed && ttl < got.ResetAfter:
				t.Fatalf("sequence %d step %d: a take set an expiry %v before its latest hold lapses (%v)", seq, i, ttl, got.ResetAfter)
			case (!got.Allowed || c.Release || c.Cost == 0) && ttl >= 0:
				t.Fatalf("sequence %d step %d: a denial, release or call of cost 0 set an expiry: %+v", seq, i, got)
			}
			ref := model.Decide(c, 0)
			fmt.Fprintf(&history, "  now %d %s cost %d release %v id %.4s limit %d -> %+v\n", c.NowMs, c.Keys.State, c.Cost, c.Release, c.HoldID, c.Limits[0].Requests, ref)
			if got != ref {
				t.Fatalf("sequence %d step %d: redis and model differ\nredis %+v\nhistory (model):\n%s", seq, i, got, history.String())
			}
			seen.count(c, got, replay)
			if g, ok := decide.GiveBackOf(c, got); ok {
				takes = append(takes, g)
			}
		}
	}
	seen.require(t)
}

// decideHoldPersistent is decidePersistent for a concurrency call, also
// returning, as the expiry of its key, the time from just before the
// script to the expiry it set: at least the TTL it gave (negative: none
// set, the key being persistent or gone), whatever the time the
// transaction takes.
func decideHoldPersistent(ctx context.Context, client *redis.Client, store *Store, c decide.Call) (decide.Result, time.Duration, error) {
	var before *redis.TimeCmd
	var expireAt *redis.DurationCmd
	r, err := decideReadPersist(ctx, client, store.scriptOf, c, func(pipe redis.Pipeliner) {
		before = pipe.Time(ctx)
	}, func(pipe redis.Pipeliner) {
		expireAt = pipe.PExpireTime(ctx, c.Keys.State)
	})
	if err != nil {
		return r, 0, err
	}
	ttl := time.Duration(-1)
	if ms := expireAt.Val(); ms >= 0 {
		ttl = time.UnixMilli(ms.Milliseconds()).Sub(before.Val().Truncate(time.Millisecond))
	}
	return r, ttl, nil
}

// holdOutcomes counts what a random sequence reached: a random test that
// never reached one of them proves nothing of it.
type holdOutcomes struct {
	denied, replayed, released, releasedNothing, lapsed int
	givenBack                                           [2]int // gave nothing, released
}

// count counts the result r of c; replay: c takes an id named before.
func (o *holdOutcomes) count(c decide.Call, r decide.Result, replay bool) {
	switch {
	case c.Release && r.Released:
		o.released++
	case c.Release:
		o.releasedNothing++
	case !r.Allowed:
		o.denied++
	case replay && r.Allowed && r.Remaining == 0:
		o.replayed++ // admitted with the set full: the id was held already
	}
	if r.Lapsed > 0 {
		o.lapsed++
	}
}

func (o *holdOutcomes) require(t *testing.T) {
	t.Helper()
	t.Logf("reached: %+v", *o)
	if o.denied == 0 || o.replayed == 0 || o.released == 0 || o.releasedNothing == 0 || o.lapsed == 0 || o.givenBack[0] == 0 || o.givenBack[1] == 0 {
		t.Errorf("some outcomes never came up: %+v", *o)
	}
}

// TestHoldsForeignRelease: a hold is released only through its own key.
func TestHoldsForeignRelease(t *testing.T) {
	_, store, prefix := differentialEnv(t)
	ctx := context.Background()
	take := decide.Call{Algorithm: decide.Concurrency, Keys: decidetest.Keys(prefix, "mine"), Cost: 1, HoldID: decide.NewHoldID(),
		Limits: []decide.Limit{{Requests: 1, Per: time.Minute}}}
	foreign := take
	foreign.Keys, foreign.Release, foreign.Cost = decidetest.Keys(prefix, "other"), true, 0
	other := take
	other.HoldID = decide.NewHoldID()
	r, err := store.Decide(ctx, []decide.Call{take, foreign, other})
	if err != nil {
		t.Fatal(err)
	}
	if !r[0].Allowed || r[1].Released || r[2].Allowed {
		t.Fatalf("take %+v, foreign release %+v, second take %+v: want the hold kept", r[0], r[1], r[2])
	}
}

// TestHoldGiveBack: the give-back of a take answered late is its release,
// which may be resent: the second changes nothing.
func TestHoldGiveBack(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	c := decide.Call{Algorithm: decide.Concurrency, Keys: decidetest.Keys(prefix, "gb"), Cost: 1, HoldID: decide.NewHoldID(),
		Limits: []decide.Limit{{Requests: 1, Per: time.Minute}}}
	r, err := store.Decide(ctx, []decide.Call{c})
	if err != nil || !r[0].Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	g, ok := decide.GiveBackOf(c, r[0])
	if !ok {
		t.Fatal("no give-back of an admitted take")
	}
	if giveBackCall(&g, 0).once {
		t.Fatal("a hold's give-back is sent once only: go-redis would not resend it")
	}
	for i, want := range []int64{1, 0} {
		units, errs := store.GiveBack(ctx, []decide.GiveBack{g})
		if errs != nil || units[0] != want {
			t.Fatalf("give-back %d: %v, %v; want %d", i, units, errs, want)
		}
	}
	if n := client.Exists(ctx, c.Keys.State).Val(); n != 0 {
		t.Errorf("the key outlived its only hold")
	}
}

// TestHoldsExact: three limiters (stores on clients of their own, each
// with a coalescer) and 200 clients of one key with a limit of 5 holds.
// All taking at once: exactly 5 are admitted. Then, clients taking,
// holding and releasing again and again: the holds in flight a backend
// would observe never pass 5.
func TestHoldsExact(t *testing.T) {
	redistest.Require(t)
	prefix := testPrefix(t, newClient(t, redisAddr()))
	var deciders []decider
	for range 3 {
		co := NewCoalescer(New(newClient(t, redisAddr())), CoalesceConfig{})
		t.Cleanup(co.Close)
		deciders = append(deciders, co.Decide)
	}
	holdsExact(t, deciders, decidetest.Keys(prefix, "exact"))
}

// holdsExact is TestHoldsExact on keys, with the limiters ds.
func holdsExact(t *testing.T, ds []decider, keys decide.Keys) {
	const limit, clients = 5, 200
	ctx := context.Background()
	rule := decide.Call{Algorithm: decide.Concurrency, Keys: keys, Limits: []decide.Limit{{Requests: limit, Per: time.Minute}}}
	call := func(d decider, c decide.Call) (decide.Result, bool) {
		r, err := d(ctx, []decide.Call{c})
		if err != nil {
			t.Error(err)
			return decide.Result{}, false
		}
		return r[0], true
	}

	var mu sync.Mutex
	var held []decide.Call
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			c := rule
			c.Cost, c.HoldID = 1, decide.NewHoldID()
			<-start
			if r, ok := call(ds[i%len(ds)], c); ok && r.Allowed {
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(held) != limit {
		t.Fatalf("%d of %d takes at once admitted, limit %d", len(held), clients, limit)
	}
	for i, c := range held {
		c.Release, c.Cost = true, 0
		if r, ok := call(ds[i%len(ds)], c); ok && !r.Released {
			t.Fatalf("release of a hold taken: %+v", r)
		}
	}

	var inFlight, most, admitted, denied atomic.Int64
	for i := range clients {
		wg.Go(func() {
			d := ds[i%len(ds)]
			for range 5 {
				c := rule
				c.Cost, c.HoldID = 1, decide.NewHoldID()
				r, ok := call(d, c)
				if !ok {
					return
				}
				if !r.Allowed {
					denied.Add(1)
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond) // the request runs
				inFlight.Add(-1)             // before its release: what the backend sees is held
				c.Release, c.Cost = true, 0
				if r, ok := call(d, c); ok && !r.Released {
					t.Errorf("release of a hold taken: %+v", r)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("churn: %d admitted, %d denied, at most %d in flight", admitted.Load(), denied.Load(), most.Load())
	if most.Load() > limit {
		t.Errorf("%d holds in flight at once, limit %d", most.Load(), limit)
	}
	if admitted.Load() == 0 || denied.Load() == 0 {
		t.Errorf("%d admitted, %d denied: want both", admitted.Load(), denied.Load())
	}
	probe := rule
	if r, ok := call(ds[0], probe); ok && (r.Remaining != limit || r.ResetAfter != 0) {
		t.Errorf("after every release: %+v, want the key empty", r)
	}
}

// holdKeyBytes measures MEMORY USAGE of a key of n holds.
func holdKeyBytes(t *testing.T, client *redis.Client, store *Store, keys decide.Keys, n int) int64 {
	t.Helper()
	ctx := context.Background()
	calls := make([]decide.Call, n)
	for i := range calls {
		calls[i] = decide.Call{Algorithm: decide.Concurrency, Keys: keys, Cost: 1, HoldID: decide.NewHoldID(),
			Limits: []decide.Limit{{Requests: int64(n), Per: time.Hour}}}
	}
	if _, err := store.Decide(ctx, calls); err != nil {
		t.Fatal(err)
	}
	bytes, err := client.MemoryUsage(ctx, keys.State, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	return bytes
}

// TestHoldMemory logs MEMORY USAGE of keys of 1, 10, 100 and 1000 holds
// (lua/concurrency.lua states them), and requires a hold to cost at most
// 128 bytes.
func TestHoldMemory(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	for _, n := range []int{1, 10, 100, 1000} {
		b := holdKeyBytes(t, client, store, decidetest.Keys(prefix, "mem"+strconv.Itoa(n)), n)
		t.Logf("%d holds: %d bytes, %.0f a hold", n, b, float64(b)/float64(n))
		if n > 1 && b > 128*int64(n) {
			t.Errorf("%d holds take %d bytes: over 128 a hold", n, b)
		}
	}
}

// A take answered at REDIS_TIMEOUT while Redis still runs it is refused by
// the limiter; when the reply comes, its hold is released (its give-back),
// so the key then admits its whole limit. A take the limiter served keeps
// its hold.
func TestLateHoldsAreReleased(t *testing.T) {
	co, proxy := lateCoalescer(t, 150*time.Millisecond, 2*time.Second)
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	takes := func(subject string, n int) []decide.Call {
		calls := make([]decide.Call, n)
		for i := range calls {
			calls[i] = decide.Call{Algorithm: decide.Concurrency, Keys: decidetest.Keys(prefix, subject), Cost: 1,
				HoldID: decide.NewHoldID(), Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
		}
		return calls
	}
	late := func(calls []decide.Call, admitted bool) {
		proxy.SetDelay(1, 150*time.Millisecond)
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Go(func() {
				_, err := co.Decide(context.Background(), []decide.Call{c})
				var l *LateError
				if !errors.As(err, &l) {
					t.Errorf("a take whose reply is late: %v, want a *LateError", err)
					return
				}
				l.Settle(0, 1, admitted)
			})
		}
		wg.Wait()
		waitSettled(t, co)
		proxy.SetDelay(0, 0)
	}
	admitted := func(calls []decide.Call) int {
		n := 0
		for _, c := range calls {
			r, err := co.Decide(context.Background(), []decide.Call{c})
			if err != nil {
				t.Fatal(err)
			}
			if r[0].Allowed {
				n++
			}
		}
		return n
	}
	late(takes("refused", 15), false) // over the limit: denials too, which hold nothing
	if got := admitted(takes("refused", 11)); got != 10 {
		t.Fatalf("after refused takes answered late: %d of 11 admitted, want the whole limit of 10", got)
	}
	late(takes("served", 4), true)
	if got := admitted(takes("served", 11)); got != 6 {
		t.Fatalf("after 4 served takes answered late: %d of 11 admitted, want 6", got)
	}
}

// A take whose reply never comes within the late wait (a Redis slower than
// REDIS_TIMEOUT + REDIS_LATE_REPLY_WAIT, a connection cut after the
// command ran) is refused by the limiter, and Redis may hold it: its
// give-back, the release of its id, needs no answer, so it is made all
// the same. Otherwise every such refused request keeps a slot for the
// hold's whole lifetime, and a Redis slow for a moment leaves the key full
// for innocents once it answers again.
func TestLateHoldsWhoseReplyNeverComesAreReleased(t *testing.T) {
	co, proxy := lateCoalescer(t, 2*time.Second, 100*time.Millisecond)
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	take := func() decide.Call {
		return decide.Call{Algorithm: decide.Concurrency, Keys: decidetest.Keys(prefix, "never"), Cost: 1,
			HoldID: decide.NewHoldID(), Limits: []decide.Limit{{Requests: 5, Per: time.Hour}}}
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			_, err := co.Decide(context.Background(), []decide.Call{take()})
			var l *LateError
			if !errors.As(err, &l) {
				t.Errorf("a take whose reply is late: %v, want a *LateError", err)
				return
			}
			l.Settle(0, 1, false)
		})
	}
	wg.Wait()
	// The give-backs meet the same slow Redis at first: they fail, and are
	// sent again once it answers.
	testkit.WaitFor(t, 10*time.Second, "a give-back to fail", func() bool {
		return testutil.ToFloat64(co.giveBacks.resent) > 0
	})
	proxy.SetDelay(0, 0)
	waitSettled(t, co)
	rdb := newClient(t, redisAddr())
	testkit.WaitFor(t, 10*time.Second, "the refused takes' holds to be released", func() bool {
		held, err := rdb.ZCard(context.Background(), decidetest.Keys(prefix, "never").State).Result()
		return err == nil && held == 0
	})
}
