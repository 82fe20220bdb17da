package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
	"github.com/ratewarden/ratewarden/lua"
)

// TestLeaseRandom plays several limiters leasing one key (grants, spending
// from the lease, settling, giving back, lapsing with the window or slot)
// through lua/lease.lua on Redis and through the model, and requires
// identical answers to every leased call. Keys are made persistent after
// each call, as in TestDecideRandom: answers agree only if a key's expiry
// never changes a decision.
func TestLeaseRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 120
	if testing.Short() {
		sequences = 20
	}
	var granted int64
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(361, uint64(seq)))
		rule := decidetest.RandomLeaseRule(rng)
		holders := make([]decidetest.Holder, 1+rng.IntN(3))
		keys := decidetest.Keys(prefix, "lease"+strconv.Itoa(seq))
		model := decide.NewMemory()
		for i, s := range decidetest.RandomLeaseSteps(rng, len(holders), 120, 1_000_000+rng.Int64N(1_000_000_000)) {
			h := &holders[s.Holder]
			if !s.GiveBack && s.Cost > 0 && h.Spend(s.Now, s.Cost) {
				continue
			}
			c := rule
			c.Keys, c.NowMs, c.Cost = keys, s.Now, s.Cost
			c.Lease = h.Lease(s.Now, s.Ask, s.GiveBack)
			got, state, ttl, err := decideLeasePersistent(context.Background(), client, store, c)
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			if c.Algorithm == decide.TokenBucket {
				checkBucketExpiry(t, c, state, ttl)
			}
			if ref := model.Decide(c, 0); got != ref {
				t.Fatalf("sequence %d step %d (%s %+v, now %d, cost %d, lease %+v): redis %+v, model %+v",
					seq, i, rule.Algorithm, rule.Limits, c.NowMs, c.Cost, c.Lease, got, ref)
			}
			h.Settle(s.Now, c.Lease, got)
			granted += got.Granted
		}
	}
	if granted == 0 {
		t.Fatal("no lease was granted: the test compares nothing of leases")
	}
}

// decideLeasePersistent is decidePersistent for a leased call, also
// returning the key's hash as the script left it and, as its expiry, the
// time from just before the script to the expiry it set: at least the TTL
// it gave (negative: none), whatever the time the transaction takes.
func decideLeasePersistent(ctx context.Context, client *redis.Client, store *Store, c decide.Call) (decide.Result, map[string]string, time.Duration, error) {
	var before *redis.TimeCmd
	var state *redis.MapStringStringCmd
	var expireAt *redis.DurationCmd
	r, err := decideReadPersist(ctx, client, store.prepare, c, func(pipe redis.Pipeliner) {
		before = pipe.Time(ctx)
	}, func(pipe redis.Pipeliner) {
		state = pipe.HGetAll(ctx, c.Keys.State)
		expireAt = pipe.PExpireTime(ctx, c.Keys.State)
	})
	if err != nil {
		return r, nil, 0, err
	}
	ttl := time.Duration(-1)
	if ms := expireAt.Val(); ms >= 0 {
		ttl = time.UnixMilli(ms.Milliseconds()).Sub(before.Val().Truncate(time.Millisecond))
	}
	return r, state.Val(), ttl, nil
}

// checkBucketExpiry requires a token bucket's key to outlive what it
// holds: until every bucket is full at its real burst (its absence reads as
// full), and while units lent count (lo), until their slot ends (ld) and
// the room they held has refilled at the rate after it. ttl bounds the
// expiry the script set at the call's time from above (see
// decideLeasePersistent); a key without one was made persistent by an
// earlier step and not written since.
func checkBucketExpiry(t *testing.T, c decide.Call, state map[string]string, ttl time.Duration) {
	t.Helper()
	if ttl < 0 || len(state) == 0 {
		return
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(state[f], 10, 64); return n }
	need := int64(0)
	for _, l := range c.Limits {
		per := strconv.FormatInt(l.Per.Milliseconds(), 10)
		if _, ok := state["t:"+per]; !ok {
			continue
		}
		tokens, rem, upd := num("t:"+per), num("r:"+per), num("u:"+per)
		if full := l.Burst * 1000; tokens < full {
			fill := ((full-tokens)*l.Per.Milliseconds() - rem + l.Rate*1000 - 1) / (l.Rate * 1000)
			need = max(need, upd+fill+1-c.NowMs)
		}
	}
	if lo, ld := num("lo"), num("ld"); lo > 0 && ld > c.NowMs {
		// Until ld the buckets fill up to burst - lo; from ld on they
		// fill the lo units the lapsed leases held at the rate.
		for _, l := range c.Limits {
			need = max(need, ld-c.NowMs+(lo*l.Per.Milliseconds()+l.Rate-1)/l.Rate)
		}
	}
	if ttl.Milliseconds() < need {
		t.Fatalf("now %d: the key expires in %v at most, before it may (%d ms): %v, limits %+v, lease %+v", c.NowMs, ttl, need, state, c.Limits, c.Lease)
	}
}

// TestLeaseSlotAgrees: the script and the model end a token bucket's
// leases with the same slot.
func TestLeaseSlotAgrees(t *testing.T) {
	src := lua.Script(string(decide.TokenBucket), lua.Lease, lua.DebitAdmitted)
	if want := fmt.Sprintf("local LEASE_SLOT = %d ", decide.LeaseSlot); !strings.Contains(src, want) {
		t.Fatalf("lua/lease.lua does not say %q", want)
	}
}

// TestLeaseSpentBeforeItsWindowTurns: on Redis's own clock, which the
// script reads to the millisecond, a lease spent by a limiter that counts
// it from the moment it sent the asking call is never spent in the next
// window, which admits its full limit. The limiter is a lease.Table whose
// clock is Redis's, read in microseconds in the transaction that runs the
// asking call: it is sent at the instant the script runs, the latest a
// real limiter can have sent it. It spends a unit of its lease 2 ms before
// the turn (the lease serves), then all it can just after the turn, at
// half the part of the millisecond that the script's clock cut off; then
// Redis decides the next window's own requests. What that window admits,
// from the lease and from Redis, must not pass the limit.
func TestLeaseSpentBeforeItsWindowTurns(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	const limit, bound = 400, 100
	per := time.Second
	redisNow := func() int64 { // µs
		tm, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			t.Fatal("100 attempts, and no grant ran late enough in its millisecond, or the next window turned meanwhile")
		}
		keys := decidetest.Keys(prefix, "turn"+strconv.Itoa(attempt))
		limits := []decide.Limit{{Requests: limit, Per: per}}
		call := func() decide.Call {
			return decide.Call{Algorithm: decide.FixedWindow, Leased: true, Keys: keys, Cost: 1, Limits: limits}
		}
		// Ask near the end of a window, so that the test waits little.
		now := redisNow()
		turn := (now/per.Microseconds() + 1) * per.Microseconds()
		if left := turn - now; left > 30_000 {
			time.Sleep(time.Duration(left-30_000) * time.Microsecond)
			now = redisNow()
		}
		tab := lease.New(lease.Config{HotUnits: 1})
		c := call()
		for range bound { // the key is hot: a lease of bound units is asked
			tab.Take(&c, bound, time.UnixMicro(now))
		}
		if !tab.Ask(&c, time.UnixMicro(now)) {
			t.Fatal("no lease asked for a hot key")
		}
		sc := store.prepare(&c)
		scKeys, scArgs := sc.keysArgs()
		var before *redis.TimeCmd
		var cmd *redis.Cmd
		if _, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			before = pipe.Time(ctx)
			cmd = sc.script.EvalSha(ctx, pipe, scKeys, scArgs...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r, err := parse(cmd)
		if err != nil {
			t.Fatal(err)
		}
		sent := before.Val().UnixMicro()
		if r.Granted == 0 || sent%1000 < 100 {
			continue // nothing lent, or too early in its millisecond to spend after the turn: again
		}
		tab.Settle(&c, r, time.UnixMicro(sent))
		turn = r.LeaseUntil * 1000
		c = call()
		if _, ok, _ := tab.Take(&c, bound, time.UnixMicro(turn-2000)); !ok {
			t.Fatalf("the lease (%+v, sent at %d µs) does not serve 2 ms before its window turns", r, sent)
		}
		late := 0
		for {
			c := call()
			if _, ok, _ := tab.Take(&c, bound, time.UnixMicro(turn+sent%1000/2)); !ok {
				break
			}
			late++
		}
		for redisNow() < turn {
			time.Sleep(time.Millisecond)
		}
		calls := make([]decide.Call, limit+50)
		for i := range calls {
			calls[i] = call()
		}
		results, err := store.Decide(ctx, calls)
		if err != nil {
			t.Fatal(err)
		}
		if redisNow() >= turn+per.Microseconds() {
			continue // the next window turned too: again
		}
		admitted := 0
		for _, r := range results {
			if r.Allowed {
				admitted++
			}
		}
		if late+admitted > limit {
			t.Fatalf("the window after the lease's admitted %d (%d from the lease after the turn, %d by Redis) of %d: lease %+v sent at %d µs",
				late+admitted, late, admitted, limit, r, sent)
		}
		t.Logf("attempt %d: lease of %d units sent %d µs into its millisecond; the next window admitted %d from the lease and %d by Redis, of %d",
			attempt, r.Granted, sent%1000, late, admitted, limit)
		return
	}
}

// TestLeaseSettledOnceWhenTheReplyIsLost: a call that gives back or
// settles a lease's units runs at most once, even when its connection is
// cut after Redis ran it (a failover, a proxy, a client killed): go-redis
// would send it again on a new connection, and the units would count
// twice. A lease of 40 is given back with its reply lost, alone (one
// command) and beside another key's (a pipeline), by digest or, after
// SCRIPT FLUSH, by EVAL; the key then admits its limit and no more.
func TestLeaseSettledOnceWhenTheReplyIsLost(t *testing.T) {
	addr := redistest.StartServer(t) // its own: SCRIPT FLUSH must not reach other tests' scripts
	proxy := redistest.StartSlowProxy(t, addr)
	client := connect(t, proxy.Addr())
	direct := newClient(t, addr)
	prefix := testPrefix(t, direct)
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: 2 * time.Second})
	defer co.Close()
	ctx := context.Background()
	const limit, lent, others = 100, 40, 50
	for _, alg := range []decide.Algorithm{decide.FixedWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		for _, tc := range []struct {
			together int
			flush    bool
		}{{1, false}, {2, false}, {1, true}, {2, true}} {
			together := tc.together
			t.Run(fmt.Sprintf("%s/%d/flush=%v", alg, together, tc.flush), func(t *testing.T) {
				now := time.Now().Truncate(time.Hour).Add(time.Minute).UnixMilli() // within one window and slot
				limits := []decide.Limit{{Requests: limit, Per: time.Hour}}
				if alg == decide.TokenBucket {
					limits = []decide.Limit{{Rate: 1, Per: time.Hour, Burst: limit}}
				}
				call := func(key string, cost int64, l decide.Lease) decide.Call {
					return decide.Call{Algorithm: alg, Leased: true, Keys: decidetest.Keys(prefix, fmt.Sprintf("lost-%s-%d-%v-%s", alg, together, tc.flush, key)),
						NowMs: now, Cost: cost, Limits: limits, Lease: l}
				}
				decideOne := func(c decide.Call) decide.Result {
					r, err := co.Decide(ctx, []decide.Call{c})
					if err != nil {
						t.Fatal(err)
					}
					return r[0]
				}
				var giveBacks []decide.Call
				for i := range together {
					key := strconv.Itoa(i)
					g := decideOne(call(key, 1, decide.Lease{Ask: lent}))
					if g.Granted != lent {
						t.Fatalf("granted %+v, want %d units", g, lent)
					}
					if r := decideOne(call(key, others, decide.Lease{})); !r.Allowed {
						t.Fatalf("the others' %d units denied: %+v", others, r)
					}
					giveBacks = append(giveBacks, call(key, 0, decide.Lease{Until: g.LeaseUntil, Unspent: lent}))
				}
				if tc.flush {
					if err := direct.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
					proxy.LoseReply(1) // NOSCRIPT comes back; the EVAL's reply is lost
				} else {
					proxy.LoseReply(0)
				}
				_, err := co.Decide(ctx, giveBacks)
				if proxy.Lost() == 0 {
					t.Fatal("no reply was lost")
				}
				t.Logf("the give-back whose reply was lost: %v", err)
				admitted := int64(1 + others)
				for admitted <= limit+lent {
					if !decideOne(call("0", 1, decide.Lease{})).Allowed {
						break
					}
					admitted++
				}
				if admitted > limit {
					t.Errorf("%d admitted of a limit of %d: the %d units given back counted twice", admitted, limit, lent)
				}
			})
		}
	}
}
