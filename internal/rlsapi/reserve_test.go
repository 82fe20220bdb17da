package rlsapi_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// reservingRule is a descriptor rule of domain edge on the path (key) whose
// request-time calls reserve estimate units of a budget of quota.
func reservingRule(id, key string, alg decide.Algorithm, quota, estimate int64) rules.Rule {
	r := rules.Rule{ID: id, Algorithm: alg, OnRedisFailure: rules.FailLocal, Reserve: estimate,
		ReserveHold: rules.Duration(time.Minute),
		Limits:      []rules.Limit{{Requests: quota, Per: rules.Duration(time.Hour)}},
		Descriptor:  &rules.DescriptorMatch{Domain: "edge", Entries: []rules.DescriptorEntry{{Key: key}}, Name: id}}
	if alg == decide.TokenBucket {
		r.Limits = []rules.Limit{{Rate: 1, Per: rules.Duration(time.Hour), Burst: quota}}
	}
	return r
}

// envoyBudget plays Envoy's rate limit filter on an LLM route, as
// deploy/gateways/envoy/ratelimit.yaml configures it: the request-time call
// sends (key, k) with hits_addend 0; its answer, when admitted, carries the
// id in dynamic_metadata; the stream-done call sends (key, k), (hold, <that
// id>) with hits_addend the tokens the response used. A refused request
// has no id in its metadata, so Envoy sends no stream-done descriptor.
type envoyBudget struct {
	e        *env
	key, val string
}

// check is the request-time call: its code and the id answered.
func (b envoyBudget) check() (rlsv3.RateLimitResponse_Code, string) {
	b.e.t.Helper()
	resp := b.e.mustCall(request("edge", hits(desc(b.key, b.val), 0)))
	id := ""
	if m := resp.DynamicMetadata; m != nil {
		id = m.Fields[rlsapi.HoldMetadataKey].GetStringValue()
	}
	return resp.OverallCode, id
}

// checkMany sends n request-time calls at once and returns the ids of those
// admitted; every admitted one must answer an id and no refused one.
func (b envoyBudget) checkMany(n int, wantIDs bool) []string {
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			code, id := b.check()
			if wantIDs && (code == ok) != (id != "") {
				b.e.t.Errorf("request-time answer %v with id %q: an admitted request, and only one, answers its id", code, id)
			}
			if code == ok {
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids
}

// done is the stream-done call naming hold with the units used; it
// returns the answer's units left.
func (b envoyBudget) done(hold string, used uint64) uint32 {
	b.e.t.Helper()
	resp := b.e.mustCall(request("edge", hits(desc(b.key, b.val, rules.ReleaseKey, hold), used)))
	if resp.DynamicMetadata != nil {
		b.e.t.Errorf("a stream-done answer carries metadata %v", resp.DynamicMetadata)
	}
	return resp.Statuses[0].LimitRemaining
}

// TestEnvoyReservationsOverGRPC: a descriptor rule with reserve takes its
// estimate at Envoy's request-time call and the stream-done call naming
// the answered id settles it. 50 request-time calls at once against a
// budget of 10 estimates admit exactly 10 (all 50 without reserve); a
// settle refunds what the estimate overstated and debits what it
// understated; a replayed or unknown id settles and debits nothing; a
// request refused by another descriptor keeps nothing and answers no id;
// one id names a call's holds and reservations alike.
func TestEnvoyReservationsOverGRPC(t *testing.T) {
	probed := rule("probed", "edge", 1000, time.Hour, "plain", "")
	e := newEnv(t, []rules.Rule{
		reservingRule("llm", "llm_key", decide.FixedWindow, 1000, 100),
		reservingRule("llm-bucket", "bucket_key", decide.TokenBucket, 1000, 100),
		probed, // the debit pattern without reserve
		rule("closed", "edge", 0, time.Minute, "closed", ""),
		rule("tight", "edge", 1, time.Hour, "tight", ""),
		concurrencyRule("streams", "stream_key", 1, ""),
	}, options{})
	reservations := func(rule, result string) float64 {
		return e.metric("rate_limit_reservations_total", map[string]string{"rule": rule, "result": result})
	}
	units := func(rule, kind string) float64 {
		return e.metric("rate_limit_reservation_units_total", map[string]string{"rule": rule, "kind": kind})
	}

	t.Run("without reserve every request passes", func(t *testing.T) {
		b := envoyBudget{e: e, key: "plain", val: "k"}
		if got := b.checkMany(50, false); len(got) != 50 {
			t.Fatalf("50 request-time calls of hits_addend 0 without reserve admitted %d, want 50", len(got))
		}
	})

	t.Run("token bucket", func(t *testing.T) {
		b := envoyBudget{e: e, key: "bucket_key", val: "k"}
		if ids := b.checkMany(50, true); len(ids) != 10 {
			t.Fatalf("50 request-time calls admitted %d, want 10", len(ids))
		}
	})

	// One id per call for all its holds and reservations: the stream-done
	// call names it once per descriptor, releasing the hold and settling
	// the reservation.
	t.Run("one id for holds and reservations", func(t *testing.T) {
		resp := e.mustCall(request("edge", hits(desc("llm_key", "shared"), 0), desc("stream_key", "shared")))
		id := resp.DynamicMetadata.GetFields()[rlsapi.HoldMetadataKey].GetStringValue()
		if resp.OverallCode != ok || !decide.ValidHoldID(id) {
			t.Fatalf("request-time call: %v, id %q", resp.OverallCode, id)
		}
		resp = e.mustCall(request("edge", hits(desc("llm_key", "shared", rules.ReleaseKey, id), 30),
			desc("stream_key", "shared", rules.ReleaseKey, id)))
		if left := resp.Statuses[0].LimitRemaining; left != 970 {
			t.Errorf("the settle of 30 on 100 reserved left %d, want 970", left)
		}
		if left := resp.Statuses[1].LimitRemaining; left != 1 {
			t.Errorf("the release left %d slots, want 1", left)
		}
		if got := reservations("llm", "settled"); got != 1 {
			t.Errorf("settled %v, want 1", got)
		}
	})

	b := envoyBudget{e: e, key: "llm_key", val: "k"}
	ids := b.checkMany(50, true)
	if len(ids) != 10 {
		t.Fatalf("50 request-time calls against 10 estimates admitted %d, want 10", len(ids))
	}
	if code, _ := b.check(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with every unit reserved: %v, want OVER_LIMIT", code)
	}
	// Used 40 of 100: 60 go back (1000 - 9×100 - 40 = 60 left).
	if left := b.done(ids[0], 40); left != 60 {
		t.Errorf("a settle of 40 on 100 reserved left %d, want 60", left)
	}
	// Envoy's stream-done call again, and ids it never answered: nothing.
	if left := b.done(ids[0], 40); left != 60 {
		t.Errorf("a replayed settle left %d, want 60 (settles and debits nothing)", left)
	}
	if left := b.done(decide.NewHoldID(), 500); left != 60 {
		t.Errorf("a settle of an unknown id left %d, want 60", left)
	}
	b.done("-", 500) // answered without Redis; the counts below show it debited nothing
	if code, _ := b.check(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("60 left, 100 estimated: %v, want OVER_LIMIT", code)
	}
	// Used 250 of 100: 150 more, fitting or not (usage 1090).
	if left := b.done(ids[1], 250); left != 0 {
		t.Errorf("a settle of 250 on 100 reserved left %d, want 0", left)
	}
	for _, id := range ids[2:] { // 8 requests that used nothing: 800 back
		b.done(id, 0)
	}
	if left := b.done(ids[2], 0); left != 710 { // a replay: it shows what is left
		t.Errorf("after 8 settles at 0: %d left, want 710 (1090 - 800 used)", left)
	}

	// A request another descriptor refuses answers no id and keeps nothing
	// (Envoy then sends no stream-done descriptor for it): refused in Redis
	// (tight is spent), its reservation goes back at once; refused without
	// Redis (closed), it takes none.
	e.mustCall(request("edge", desc("tight", "x")))
	for _, other := range []string{"tight", "closed", "closed"} {
		resp := e.mustCall(request("edge", hits(desc("llm_key", "k"), 0), desc(other, "x")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.DynamicMetadata != nil {
			t.Fatalf("refused request: %v, metadata %v; want OVER_LIMIT without", resp.OverallCode, resp.DynamicMetadata)
		}
	}
	// A stream-done call without the hold entry (a route not sending the id)
	// debits its hits_addend as before, and takes nothing.
	resp := e.mustCall(request("edge", hits(desc("llm_key", "k"), 10)))
	if resp.OverallCode != ok || resp.DynamicMetadata != nil || resp.Statuses[0].LimitRemaining != 700 {
		t.Errorf("a debit without hold: %v, metadata %v, %d left; want OK, none, 700",
			resp.OverallCode, resp.DynamicMetadata, resp.Statuses[0].LimitRemaining)
	}

	for result, want := range map[string]float64{"taken": 12, "denied": 42, "returned": 1, "settled": 11, "unknown": 4} {
		if got := reservations("llm", result); got != want {
			t.Errorf("rate_limit_reservations_total{rule=llm,result=%q} = %v, want %v", result, got, want)
		}
	}
	for kind, want := range map[string]float64{"reserved": 1200, "refunded": 70 + 60 + 800 + 100, "excess": 150} {
		if got := units("llm", kind); got != want {
			t.Errorf("rate_limit_reservation_units_total{rule=llm,kind=%q} = %v, want %v", kind, got, want)
		}
	}
	if ev := e.events.last(t); ev.Hold != "" {
		t.Errorf("the debit's event names hold %q, want none", ev.Hold)
	}
}

// upHealth answers every heartbeat: Redis is up, one live limiter.
type upHealth struct{}

func (upHealth) Beat(context.Context, time.Time) (int, error) { return 1, nil }

// A reservation Envoy's request-time call took in memory while Redis was
// away, settled by its stream-done call once the limiter decides in Redis
// again, is unknown to Redis: it is settled in memory and its hits_addend
// debited in Redis, once. Before, the tokens were counted nowhere.
func TestEnvoyReservationTakenInMemorySettledAfterRecovery(t *testing.T) {
	var offset atomic.Int64 // the limiter's clock runs ahead of the wall clock by this
	e := newEnv(t, []rules.Rule{reservingRule("llm", "llm_key", decide.FixedWindow, 1000, 100)}, options{
		limiter: limiter.Config{Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
			Health: upHealth{}, HealthInterval: time.Millisecond, Mode: limiter.ModeConfig{RecoverAfter: time.Second}},
	})
	e.svc.RedisDown("test")
	b := envoyBudget{e: e, key: "llm_key", val: "k"}
	code, id := b.check()
	if code != ok || id == "" {
		t.Fatalf("request-time call in local mode: %v, id %q", code, id)
	}
	e.svc.Start()
	t.Cleanup(e.svc.Stop)
	offset.Store(int64(2 * time.Second)) // past RecoverAfter of healthy heartbeats
	testkit.WaitFor(t, 10*time.Second, "the limiter back in redis mode", func() bool { return e.svc.Mode() == limiter.ModeRedis })
	if left := b.done(id, 500); left != 500 {
		t.Fatalf("stream-done of 500 on a reservation taken in memory left %d in Redis, want 500", left)
	}
	if left := b.done(id, 500); left != 500 {
		t.Fatalf("the same stream-done again left %d, want 500 (settled once)", left)
	}
}
