package redisstore

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestSlidingWindowMembers checks that the log holds one member per
// millisecond with admissions, whatever their costs: N admissions in N
// distinct ms leave N members, not the sum of their costs, and admissions
// in one ms share a member. It runs on a private server: a log of one
// member per unit would put millions on the shared one.
func TestSlidingWindowMembers(t *testing.T) {
	client := redistest.PrivateClient(t)
	store := New(client)
	const prefix = "rwtest:"
	ctx := context.Background()
	now := serverMs(t, client)
	call := func(subject string, cost, at int64) decide.Call {
		return decide.Call{Keys: decidetest.Keys(prefix, subject), Algorithm: decide.SlidingWindow,
			Limits: []decide.Limit{{Requests: 1 << 40, Per: time.Hour}}, Cost: cost, NowMs: at}
	}
	costs := []int64{1, 1_000_000, 7, 999_999, 1, 250_000, 3, 1_000_000}
	var sum int64
	for i, cost := range costs {
		r, err := store.Decide(ctx, []decide.Call{call("distinct", cost, now+int64(i))})
		if err != nil || !r[0].Allowed {
			t.Fatalf("admission %d: %+v, %v", i, r, err)
		}
		sum += cost
	}
	if n := members(t, client, call("distinct", 0, 0).Keys.State); n != int64(len(costs)) {
		t.Errorf("%d admissions of %d units in distinct ms: %d members, want %d", len(costs), sum, n, len(costs))
	}
	for i, cost := range costs {
		if _, err := store.Decide(ctx, []decide.Call{call("one ms", cost, now)}); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
	}
	if n := members(t, client, call("one ms", 0, 0).Keys.State); n != 1 {
		t.Errorf("%d admissions in one ms: %d members, want 1", len(costs), n)
	}
	r, err := store.Decide(ctx, []decide.Call{call("one ms", 0, now)})
	if err != nil || r[0].Remaining != 1<<40-sum {
		t.Errorf("remaining after %d units: %+v, %v", sum, r, err)
	}
	redistest.RequireExpiry(t, client, prefix) // a member rewritten in place keeps its key's expiry
}

// TestSlidingWindowWorkIndependentOfCost checks on a private server (whose
// command statistics no one else moves) that a decision of cost 1 000 000
// runs exactly the Redis commands one of cost 1 runs, admitted or denied,
// and that the admission adds one member.
func TestSlidingWindowWorkIndependentOfCost(t *testing.T) {
	client := redistest.PrivateClient(t)
	store := New(client)
	ctx := context.Background()
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	now := serverMs(t, client)
	// commands runs one call and returns the commands Redis ran for it.
	commands := func(subject string, cost int64, allowed bool) map[string]int {
		t.Helper()
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		c := decide.Call{
			Keys:      decidetest.Keys("rwtest:", subject),
			Algorithm: decide.SlidingWindow,
			Limits:    []decide.Limit{{Requests: 1_000_000, Per: time.Minute}, {Requests: 2_000_000, Per: time.Hour}},
			Cost:      cost,
			NowMs:     now,
		}
		r, err := store.Decide(ctx, []decide.Call{c})
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Allowed != allowed {
			t.Fatalf("%s, cost %d: %+v, want allowed %v", subject, cost, r[0], allowed)
		}
		return redistest.CommandCalls(t, client)
	}
	small, large := commands("one", 1, true), commands("million", 1_000_000, true)
	if !maps.Equal(small, large) {
		t.Errorf("admitted: commands of cost 1 %v, of cost 1 000 000 %v", small, large)
	}
	if large["zadd"] != 1 {
		t.Errorf("an admission of cost 1 000 000 ran ZADD %d times, want 1", large["zadd"])
	}
	if n := members(t, client, decidetest.Keys("rwtest:", "million").State); n != 1 {
		t.Errorf("an admission of cost 1 000 000: %d members, want 1", n)
	}
	// each key now holds one unit too many for the other's cost
	small, large = commands("million", 1, false), commands("one", 1_000_000, false)
	if !maps.Equal(small, large) {
		t.Errorf("denied: commands of cost 1 %v, of cost 1 000 000 %v", small, large)
	}
}

func members(tb testing.TB, client *redis.Client, key string) int64 {
	tb.Helper()
	n, err := client.ZCard(context.Background(), key).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// serverMs returns the Redis server's clock in ms: instants derived from
// it stay clear of the key expiries the scripts set from it.
func serverMs(tb testing.TB, client *redis.Client) int64 {
	tb.Helper()
	now, err := client.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return now.UnixMilli()
}
