package rlsapi_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// concurrencyRule is a concurrency descriptor rule of domain edge on the
// path (key) admitting n in flight, released as release says.
func concurrencyRule(id, key string, n int64, release rules.HoldRelease) rules.Rule {
	return rules.Rule{ID: id, Algorithm: decide.Concurrency, OnRedisFailure: rules.FailLocal,
		Limits: []rules.Limit{{Concurrent: n, Hold: rules.Duration(time.Minute)}},
		Descriptor: &rules.DescriptorMatch{Domain: "edge", Entries: []rules.DescriptorEntry{{Key: key}},
			Name: id, Release: release}}
}

// envoyHolds plays Envoy's rate limit filter over real gRPC against real
// Redis, as deploy/gateways/envoy/ratelimit.yaml configures it: the
// request-time call sends (api_key, k); its answer, when admitted, carries
// the hold id in dynamic_metadata, which Envoy keeps in the stream's
// metadata; the stream-done call sends (api_key, k), (hold, <that id>). A
// refused request has no id in its metadata, so its stream-done action
// produces no descriptor and Envoy sends no call.
type envoyHolds struct {
	e   *env
	key string
}

// take is the request-time call; it returns the code and the hold id
// answered (empty when none).
func (h envoyHolds) take() (rlsv3.RateLimitResponse_Code, string) {
	h.e.t.Helper()
	resp := h.e.mustCall(request("edge", desc(h.key, "k")))
	id := ""
	if m := resp.DynamicMetadata; m != nil {
		id = m.Fields[rlsapi.HoldMetadataKey].GetStringValue()
	}
	if (resp.OverallCode == ok) != (id != "") {
		h.e.t.Errorf("request-time answer %v with hold %q: an admitted request, and only one, answers its hold", resp.OverallCode, id)
	}
	return resp.OverallCode, id
}

// release is the stream-done call naming hold (Envoy ignores its answer);
// it returns what the answer says is left.
func (h envoyHolds) release(hold string) uint32 {
	h.e.t.Helper()
	resp := h.e.mustCall(request("edge", desc(h.key, "k", rules.ReleaseKey, hold)))
	if resp.OverallCode != ok || resp.DynamicMetadata != nil {
		h.e.t.Errorf("stream-done answer %v, metadata %v; want OK without", resp.OverallCode, resp.DynamicMetadata)
	}
	return resp.Statuses[0].LimitRemaining
}

// takeMany sends n request-time calls at once and returns the ids of those
// admitted.
func (h envoyHolds) takeMany(n int) []string {
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if code, id := h.take(); code == ok {
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids
}

// TestEnvoyHoldsOverGRPC: with 3 in flight, 10 request-time calls at once
// admit exactly 3; a stream-done call frees one and a fourth request is
// then admitted; stream-done calls beyond the holds release nothing and
// are counted. A rule releasing by id frees only the hold named: a
// stream-done call naming an unknown id or none frees nothing. A rule
// releasing the oldest frees one hold per stream-done call naming none.
func TestEnvoyHoldsOverGRPC(t *testing.T) {
	e := newEnv(t, []rules.Rule{
		concurrencyRule("streams", "api_key", 3, ""),
		concurrencyRule("uploads", "upload", 3, rules.ReleaseOldest),
		rule("closed", "edge", 0, time.Minute, "closed", ""), // denies every request
	}, options{})
	holds := func(rule, result string) float64 {
		return e.metric("rate_limit_holds_total", map[string]string{"rule": rule, "result": result})
	}
	wantHolds := func(rule string, want map[string]float64) {
		t.Helper()
		for result, n := range want {
			if got := holds(rule, result); got != n {
				t.Errorf("rate_limit_holds_total{rule=%q,result=%q} = %v, want %v", rule, result, got, n)
			}
		}
	}

	t.Run("by id", func(t *testing.T) {
		h := envoyHolds{e: e, key: "api_key"}
		ids := h.takeMany(10)
		if len(ids) != 3 {
			t.Fatalf("10 request-time calls admitted %d, want 3", len(ids))
		}
		// A caller of the RLS port without an id Envoy was given frees nothing.
		if left := h.release(decide.NewHoldID()); left != 0 {
			t.Errorf("a release of an unknown id left %d, want 0", left)
		}
		if left := h.release("-"); left != 0 {
			t.Errorf("a release naming no id left %d, want 0", left)
		}
		if code, _ := h.take(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("after releases of holds nobody took: %v, want OVER_LIMIT", code)
		}
		if left := h.release(ids[0]); left != 1 {
			t.Errorf("the stream-done call of an admitted request left %d, want 1", left)
		}
		code, fourth := h.take()
		if code != ok {
			t.Fatalf("a request after a release: %v, want OK", code)
		}
		// Envoy's stream-done calls for every admitted request, then the
		// same again: the second round frees nothing.
		for _, id := range []string{ids[0], ids[1], ids[2], fourth, ids[1]} {
			h.release(id)
		}
		if got := h.takeMany(4); len(got) != 3 {
			t.Errorf("after every hold was released: %d of 4 admitted, want 3", len(got))
		}
		wantHolds("streams", map[string]float64{"taken": 7, "denied": 9, "released": 4, "unknown": 3, "unnamed": 1})
	})

	// A request another descriptor refuses keeps no hold and answers no id:
	// Envoy then sends no release for it.
	t.Run("refused by another descriptor", func(t *testing.T) {
		for range 5 {
			resp := e.mustCall(request("edge", desc("api_key", "k2"), desc("closed", "x")))
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.DynamicMetadata != nil {
				t.Fatalf("refused request: %v, metadata %v; want OVER_LIMIT without", resp.OverallCode, resp.DynamicMetadata)
			}
		}
		resp := e.mustCall(request("edge", desc("api_key", "k2")))
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
			t.Errorf("after 5 refused requests: %v, %d left; want OK, 2 (no hold kept)", resp.OverallCode, resp.Statuses[0].LimitRemaining)
		}
	})

	// POST /json answers the same: the hold id in dynamicMetadata.
	t.Run("json", func(t *testing.T) {
		status, body := e.postJSON(`{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"j"}]}]}`)
		var answer struct {
			OverallCode     string            `json:"overallCode"`
			DynamicMetadata map[string]string `json:"dynamicMetadata"`
		}
		if err := json.Unmarshal([]byte(body), &answer); err != nil {
			t.Fatalf("/json answer %s: %v", body, err)
		}
		if status != 200 || answer.OverallCode != "OK" || !decide.ValidHoldID(answer.DynamicMetadata[rlsapi.HoldMetadataKey]) {
			t.Errorf("/json request-time call: %d %s; want 200, OK and a hold id in dynamicMetadata", status, body)
		}
		if ev := e.events.last(t); ev.Hold != answer.DynamicMetadata[rlsapi.HoldMetadataKey] {
			t.Errorf("the decision event's hold %q, want the answered %q", ev.Hold, answer.DynamicMetadata[rlsapi.HoldMetadataKey])
		}
	})

	t.Run("oldest", func(t *testing.T) {
		h := envoyHolds{e: e, key: "upload"}
		if ids := h.takeMany(10); len(ids) != 3 {
			t.Fatalf("10 request-time calls admitted %d, want 3", len(ids))
		}
		if left := h.release("release"); left != 1 {
			t.Errorf("a stream-done call naming no hold left %d, want 1", left)
		}
		if code, _ := h.take(); code != ok {
			t.Fatalf("a request after a release: %v, want OK", code)
		}
		for i, want := range []uint32{1, 2, 3, 3, 3} { // the last two: beyond the holds
			if left := h.release("release"); left != want {
				t.Errorf("stream-done call %d left %d, want %d", i+1, left, want)
			}
		}
		wantHolds("uploads", map[string]float64{"taken": 4, "denied": 7, "released": 4, "unknown": 2, "unnamed": 0})
	})
}
