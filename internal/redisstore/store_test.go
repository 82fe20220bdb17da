package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
	"github.com/ratewarden/ratewarden/lua"
)

// TestDecideScenarios runs every scenario through the reference model and,
// on real Redis, through every variant of the scripts that can decide its
// rule (the full one always; those without holds when the rule has no
// penalty or escalations): all must give the expected results.
func TestDecideScenarios(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range decidetest.Scenarios() {
		for _, v := range variantsFor(store, &s.Rule) {
			t.Run(s.Name+"/"+string(v), func(t *testing.T) {
				prefix := testPrefix(t, client)
				stepScenario(t, s, decidetest.Keys(prefix, "subject"), func(c decide.Call) (decide.Result, error) {
					return decideAs(context.Background(), client, store, c, v)
				})
				redistest.RequireExpiry(t, client, prefix)
			})
		}
	}
}

// variantsFor returns the variants of the scripts that can decide calls of
// rule, fullest first.
func variantsFor(store *Store, rule *decide.Call) []lua.Variant {
	vs := []lua.Variant{lua.Full}
	if rule.Penalty == 0 && len(rule.Escalations) == 0 {
		vs = append(vs, lua.NoHolds)
		if len(rule.Limits) == 1 && store.scriptsOf(rule).one != nil {
			vs = append(vs, lua.OneLimit)
		}
	}
	return vs
}

// decideAs decides c with variant v of its algorithm's script.
func decideAs(ctx context.Context, client redis.UniversalClient, store *Store, c decide.Call, v lua.Variant) (decide.Result, error) {
	if err := c.Validate(); err != nil {
		return decide.Result{}, err
	}
	return parse(runScripts(ctx, client, nil, []scriptCall{store.prepareAs(&c, v)})[0])
}

// TestVariantSwitch changes a rule between calls on one key: it gains a
// penalty, a second limit, escalations, and loses them again, so each call
// goes to another script (one-limit, full, without holds). The count
// carries over every switch, for every algorithm with scripts alone, as
// the model has it. (A fixed window of one limit is counted without a
// script, on a counter of its own: TestCountedSwitch.)
func TestVariantSwitch(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	hour := decide.Limit{Requests: 5, Rate: 1, Burst: 5, Per: time.Hour}
	minute := decide.Limit{Requests: 10, Rate: 1, Burst: 10, Per: time.Minute} // never binds
	esc := []decide.Escalation{{Triggers: 2, Within: time.Minute, Penalty: time.Hour}}
	steps := []struct {
		limits      []decide.Limit
		penalty     time.Duration
		escalations []decide.Escalation
		want        lua.Variant
		allowed     bool
		remaining   int64
	}{
		{[]decide.Limit{hour}, 0, nil, lua.OneLimit, true, 4},
		{[]decide.Limit{hour}, time.Second, nil, lua.Full, true, 3},
		{[]decide.Limit{hour, minute}, 0, nil, lua.NoHolds, true, 2},
		{[]decide.Limit{hour, minute}, 0, esc, lua.Full, true, 1},
		{[]decide.Limit{hour}, 0, nil, lua.OneLimit, true, 0},
		{[]decide.Limit{hour}, 0, nil, lua.OneLimit, false, 0},
		{[]decide.Limit{hour}, time.Second, nil, lua.Full, false, 0},
	}
	for _, alg := range []decide.Algorithm{decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			keys := decidetest.Keys(testPrefix(t, client), "switch")
			model := decide.NewMemory()
			now := int64(400 * 3_600_000) // the start of an hour: no previous window
			for i, st := range steps {
				c := decide.Call{Keys: keys, Algorithm: alg, Limits: st.limits, Cost: 1, Penalty: st.penalty, Escalations: st.escalations, NowMs: now + int64(i)}
				want := st.want
				if want == lua.OneLimit && store.scripts[scriptSet{alg: alg}].one == nil {
					want = lua.NoHolds
				}
				if sc := store.prepare(&c); sc.script != store.scripts[scriptSet{alg: alg}].of(want) {
					t.Fatalf("step %d: the store does not pick the %s script", i, want)
				}
				got, err := store.Decide(context.Background(), []decide.Call{c})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if ref := model.Decide(c, 0); got[0] != ref {
					t.Errorf("step %d (%s): redis and model differ\n redis %+v\n model %+v", i, want, got[0], ref)
				}
				if got[0].Allowed != st.allowed || got[0].Remaining != st.remaining || got[0].Held {
					t.Errorf("step %d (%s): %+v, want allowed %v with %d remaining", i, want, got[0], st.allowed, st.remaining)
				}
			}
		})
	}
}

// TestDecideBatch runs all scenarios at once (but those of counted calls
// whose clock goes back: see countedBackwards): step i of every scenario
// goes into one pipeline, whose results must come back in order.
func TestDecideBatch(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	scenarios := slices.DeleteFunc(decidetest.Scenarios(), countedBackwards)
	for i := 0; ; i++ {
		var calls []decide.Call
		var wants []decide.Result
		var names []string
		for n, s := range scenarios {
			if i < len(s.Steps) {
				calls = append(calls, s.Call(decidetest.Keys(prefix, strconv.Itoa(n)), i))
				wants = append(wants, s.Steps[i].Want)
				names = append(names, s.Name)
			}
		}
		if len(calls) == 0 {
			break
		}
		got, err := store.Decide(context.Background(), calls)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for j := range calls {
			if got[j] != wants[j] {
				t.Errorf("%s step %d:\n got  %+v\n want %+v", names[j], i, got[j], wants[j])
			}
		}
	}
}

// TestNoScript checks that decisions survive a server without the scripts:
// never loaded, or flushed after loading (on a private server).
func TestNoScript(t *testing.T) {
	testkit.AvoidHourEnd(t) // the fixed window's remaining is read back
	client := redistest.PrivateClient(t)
	store := New(client)
	ctx := context.Background()
	call := func(alg decide.Algorithm, subject string) decide.Call {
		c := decide.Call{
			Keys:      decidetest.Keys("rwtest:", subject),
			Algorithm: alg,
			Limits:    []decide.Limit{{Requests: 2, Rate: 1, Burst: 2, Per: time.Hour}},
			Cost:      1,
		}
		if c.Counted() { // a penalty makes it a script's call
			c.Penalty = time.Second
		}
		return c
	}
	batch := []decide.Call{
		call(decide.FixedWindow, "fixed"), call(decide.SlidingWindow, "sliding"), call(decide.TokenBucket, "bucket"),
		call(decide.SlidingWindowCounter, "counter"),
	}

	if _, err := store.Decide(ctx, batch[:1]); err != nil {
		t.Fatalf("single call before load: %v", err)
	}
	if n := redistest.CommandCalls(t, client)["eval"]; n != 1 {
		t.Fatalf("EVAL ran %d times before load, want 1 (the NOSCRIPT fallback)", n)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := store.Decide(ctx, batch)
	if err != nil {
		t.Fatalf("batch after flush: %v", err)
	}
	if n := redistest.CommandCalls(t, client)["eval"]; n != 1+len(batch) {
		t.Fatalf("EVAL ran %d times after the flushed batch, want %d", n, 1+len(batch))
	}
	for i, r := range got {
		want := int64(1)
		if i == 0 {
			want = 0 // the fixed window was already used once
		}
		if !r.Allowed || r.Remaining != want {
			t.Errorf("call %d after flush: %+v, want allowed with %d remaining", i, r, want)
		}
	}

	// the EVAL fallback cached the scripts: EVALSHA works again
	if err := evalShaOnly(ctx, client, store, batch[1]); err != nil {
		t.Errorf("evalsha after the fallback: %v", err)
	}

	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	err = evalShaOnly(ctx, client, store, batch[0])
	if class := ClassifyError(err); class != "noscript" {
		t.Errorf("ClassifyError(%v) = %q, want noscript", err, class)
	}
	if err := store.Load(ctx); err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := evalShaOnly(ctx, client, store, batch[2]); err != nil {
		t.Errorf("evalsha after load: %v", err)
	}
}

// evalShaOnly runs c with EVALSHA only (no EVAL fallback), by the script
// store would choose for it.
func evalShaOnly(ctx context.Context, client *redis.Client, store *Store, c decide.Call) error {
	sc := store.prepare(&c)
	keys, args := sc.keysArgs()
	return client.EvalSha(ctx, sc.script.Hash(), keys, args...).Err()
}

// TestDecideExactUnderConcurrency sends 1000 calls from 200 goroutines with
// the server clock: exactly the limit is admitted.
func TestDecideExactUnderConcurrency(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	exactUnderConcurrency(t, client, func(*testing.T) decider { return store.Decide })
}

// decider is Store.Decide or Coalescer.Decide.
type decider func(context.Context, []decide.Call) ([]decide.Result, error)

// exactUnderConcurrency runs, for each algorithm with a limit of 100, 200
// goroutines × 5 calls through the decider that newDecider returns, and
// requires exactly 100 admitted and no failure.
func exactUnderConcurrency(t *testing.T, client *redis.Client, newDecider func(*testing.T) decider) {
	avoidDayBoundary(t, client)
	for _, tc := range []struct {
		alg   decide.Algorithm
		limit decide.Limit
	}{
		{decide.FixedWindow, decide.Limit{Requests: 100, Per: 24 * time.Hour}},
		{decide.SlidingWindow, decide.Limit{Requests: 100, Per: time.Hour}},
		// a window boundary would let the previous window's weight decide:
		// one aligned day, away from its end, keeps every call in one window
		{decide.SlidingWindowCounter, decide.Limit{Requests: 100, Per: 24 * time.Hour}},
		{decide.TokenBucket, decide.Limit{Rate: 1, Per: time.Hour, Burst: 100}},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			decideFn := newDecider(t)
			c := decide.Call{Keys: decidetest.Keys(testPrefix(t, client), "hot"), Algorithm: tc.alg, Limits: []decide.Limit{tc.limit}, Cost: 1}
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for range 200 {
				wg.Go(func() {
					for range 5 {
						r, err := decideFn(context.Background(), []decide.Call{c})
						switch {
						case err != nil:
							failed.Add(1)
						case r[0].Allowed:
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d calls failed", n)
			}
			if n := admitted.Load(); n != 100 {
				t.Errorf("admitted %d, want 100", n)
			}
		})
	}
}

// avoidDayBoundary waits when the server clock is within a minute of the
// end of a UTC day, where a 24h fixed window or window counter would start a
// new window mid-test.
func avoidDayBoundary(tb testing.TB, client *redis.Client) {
	tb.Helper()
	now, err := client.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	const day = 24 * time.Hour
	if left := day - time.Duration(now.UnixMilli()%day.Milliseconds())*time.Millisecond; left < time.Minute {
		time.Sleep(left + time.Second)
	}
}

// TestKeysExpire checks that every key the scripts write carries a TTL:
// state, hold and hits of each algorithm, with the server clock.
func TestKeysExpire(t *testing.T) {
	testkit.AvoidHourEnd(t) // each second call must find the hour's first
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	ctx := context.Background()
	for _, alg := range []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		c := decide.Call{
			Keys:        decidetest.Keys(prefix, string(alg)),
			Algorithm:   alg,
			Limits:      []decide.Limit{{Requests: 1, Rate: 1, Burst: 1, Per: time.Hour}, {Requests: 5, Rate: 5, Burst: 5, Per: time.Minute}},
			Cost:        1,
			Penalty:     time.Minute,
			Escalations: []decide.Escalation{{Triggers: 1, Within: time.Hour, Penalty: time.Hour}},
		}
		for i, wantAllowed := range []bool{true, false} {
			r, err := store.Decide(ctx, []decide.Call{c})
			if err != nil {
				t.Fatal(err)
			}
			if r[0].Allowed != wantAllowed {
				t.Fatalf("%s call %d: %+v", alg, i, r[0])
			}
		}
		for _, key := range []string{c.Keys.State, c.Keys.Hold, c.Keys.Hits} {
			ttl, err := client.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 {
				t.Errorf("%s: PTTL %s = %v, want > 0", alg, key, ttl)
			}
		}
	}
	if n := redistest.RequireExpiry(t, client, prefix); n != 12 {
		t.Errorf("%d keys written, want 12", n)
	}
}

func TestDecideErrors(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	ctx := context.Background()
	limits := []decide.Limit{{Requests: 1, Per: time.Second}}

	long := prefix + strings.Repeat("u", 1000)
	_, err := store.Decide(ctx, []decide.Call{{Keys: decidetest.Keys(long, "x"), Algorithm: decide.FixedWindow}})
	if err == nil || !strings.Contains(err.Error(), "no limits") || len(err.Error()) > 200 {
		t.Errorf("invalid call: error %v", err)
	}

	wrong := decidetest.Keys(prefix, "wrongtype")
	if err := client.Set(ctx, wrong.State, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	calls := []decide.Call{
		{Keys: decidetest.Keys(prefix, "fine"), Algorithm: decide.FixedWindow, Limits: limits, Cost: 1},
		{Keys: wrong, Algorithm: decide.SlidingWindow, Limits: limits, Cost: 1},
	}
	for _, batch := range [][]decide.Call{calls[1:], calls} {
		_, err := store.Decide(ctx, batch)
		var redisErr redis.Error
		if !errors.As(err, &redisErr) || !strings.Contains(err.Error(), "redis decide sliding_window key") {
			t.Errorf("batch of %d with a wrong type: error %v", len(batch), err)
		}
		if class := ClassifyError(err); class != "script" {
			t.Errorf("ClassifyError(%v) = %q, want script", err, class)
		}
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = store.Decide(canceled, calls[:1])
	if class := ClassifyError(err); class != "canceled" {
		t.Errorf("ClassifyError(%v) = %q, want canceled", err, class)
	}

	if r, err := store.Decide(ctx, nil); r != nil || err != nil {
		t.Errorf("Decide(nil) = %v, %v", r, err)
	}
}

func BenchmarkDecide(b *testing.B) {
	client := newClient(b, redisAddr())
	store := New(client)
	prefix := testPrefix(b, client)
	if err := store.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, alg := range []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		b.Run(string(alg), func(b *testing.B) {
			limits := []decide.Limit{{Requests: 1000, Rate: 1000, Burst: 1000, Per: time.Second}}
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				subject := string(alg) + strconv.FormatInt(n.Add(1), 10)
				calls := []decide.Call{{Keys: decidetest.Keys(prefix, subject), Algorithm: alg, Limits: limits, Cost: 1}}
				for pb.Next() {
					if _, err := store.Decide(context.Background(), calls); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestDecidedAt: a call decided on the server's clock reports the time it
// was decided at (decide.Result.At), whatever script decides it, so that a
// give-back finds the window or log member it counted in; a counted call
// reports the time it was stamped with, the server's as the store
// estimates it.
func TestDecidedAt(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	ctx := context.Background()
	prefix := testPrefix(t, client)
	window := []decide.Limit{{Requests: 5, Per: time.Hour}}
	bucket := []decide.Limit{{Rate: 1, Per: time.Second, Burst: 5}}
	calls := map[string]decide.Call{
		"counted":       {Algorithm: decide.FixedWindow, Limits: window},
		"fixed penalty": {Algorithm: decide.FixedWindow, Limits: window, Penalty: time.Second},
		"sliding one":   {Algorithm: decide.SlidingWindow, Limits: window},
		"sliding two":   {Algorithm: decide.SlidingWindow, Limits: append(slices.Clip(window), decide.Limit{Requests: 9, Per: time.Minute})},
		"counter one":   {Algorithm: decide.SlidingWindowCounter, Limits: window},
		"bucket one":    {Algorithm: decide.TokenBucket, Limits: bucket},
		"bucket leased": {Algorithm: decide.TokenBucket, Limits: bucket, Leased: true, Lease: decide.Lease{Ask: 2}},
		"fixed leased":  {Algorithm: decide.FixedWindow, Limits: window, Leased: true, Lease: decide.Lease{Ask: 2}},
	}
	for name, c := range calls {
		t.Run(name, func(t *testing.T) {
			c.Keys, c.Cost = decidetest.Keys(prefix, name), 1
			before := serverMs(t, client)
			r, err := store.Decide(ctx, []decide.Call{c})
			if err != nil {
				t.Fatal(err)
			}
			after := serverMs(t, client)
			slack := int64(0)
			if c.Counted() {
				slack = 1000 // the store's estimate of the server's clock
			}
			if !r[0].Allowed || r[0].At < before-slack || r[0].At > after+slack {
				t.Errorf("result %+v: want admitted at a time in [%d, %d]", r[0], before-slack, after+slack)
			}
		})
	}
}
