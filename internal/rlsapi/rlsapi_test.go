package rlsapi_test

import (
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

const (
	ok        = rlsv3.RateLimitResponse_OK
	overLimit = rlsv3.RateLimitResponse_OVER_LIMIT
	second    = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute    = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour      = rlsv3.RateLimitResponse_RateLimit_HOUR
)

// wantStatus is what a DescriptorStatus must hold. limit nil: no
// current_limit; reset 0: no duration_until_reset, else an upper bound of
// it (the window's length), which must be positive.
type wantStatus struct {
	code      rlsv3.RateLimitResponse_Code
	limit     *rlsv3.RateLimitResponse_RateLimit
	remaining uint32
	reset     time.Duration
}

func limitOf(name string, n uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: n, Unit: unit}
}

func checkResponse(t *testing.T, step string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, want ...wantStatus) {
	t.Helper()
	if resp.OverallCode != overall {
		t.Errorf("%s: overall %s, want %s", step, resp.OverallCode, overall)
	}
	if len(resp.Statuses) != len(want) {
		t.Fatalf("%s: %d statuses, want %d", step, len(resp.Statuses), len(want))
	}
	for i, w := range want {
		st := resp.Statuses[i]
		if st.Code != w.code {
			t.Errorf("%s: statuses[%d].code %s, want %s", step, i, st.Code, w.code)
		}
		switch l := st.CurrentLimit; {
		case w.limit == nil && l != nil:
			t.Errorf("%s: statuses[%d].current_limit %v, want none", step, i, l)
		case w.limit != nil && (l == nil || l.Name != w.limit.Name || l.RequestsPerUnit != w.limit.RequestsPerUnit || l.Unit != w.limit.Unit):
			t.Errorf("%s: statuses[%d].current_limit %v, want %v", step, i, l, w.limit)
		}
		if st.LimitRemaining != w.remaining {
			t.Errorf("%s: statuses[%d].limit_remaining %d, want %d", step, i, st.LimitRemaining, w.remaining)
		}
		switch d := st.DurationUntilReset; {
		case w.reset == 0 && d != nil:
			t.Errorf("%s: statuses[%d].duration_until_reset %v, want none", step, i, d.AsDuration())
		case w.reset != 0 && (d == nil || d.AsDuration() <= 0 || d.AsDuration() > w.reset):
			t.Errorf("%s: statuses[%d].duration_until_reset %v, want in (0, %s]", step, i, d.AsDuration(), w.reset)
		}
	}
}

// Every field of the answer, for each kind of descriptor in one call:
// a rule's limit, no rule, an unlimited rule, a shadow rule, a token
// bucket, a rule of two limits; the overall code is their OR.
func TestAnswerDescribesEachDescriptor(t *testing.T) {
	testkit.AvoidWindowEnd(t, time.Minute, 15*time.Second) // per-ip and multi count in minute windows
	perIP := rule("per-ip", "edge", 3, time.Minute, "remote_address", "")
	perIP.Descriptor.Name = "per_ip"
	shadow := rule("shadow", "edge", 1, time.Hour, "user", "")
	shadow.Shadow = true
	multi := rule("multi", "edge", 100, time.Hour, "tenant", "")
	multi.Limits = append(multi.Limits, rules.Limit{Requests: 2, Per: rules.Duration(time.Minute)})
	e := newEnv(t, []rules.Rule{
		perIP, shadow, multi,
		{ID: "internal", Algorithm: decide.FixedWindow, Descriptor: &rules.DescriptorMatch{Domain: "edge",
			Entries: []rules.DescriptorEntry{{Key: "internal"}}, Unlimited: true}},
		{ID: "bucket", Algorithm: decide.TokenBucket, Limits: []rules.Limit{{Rate: 10, Burst: 20, Per: rules.Duration(time.Second)}},
			Descriptor: &rules.DescriptorMatch{Domain: "edge", Entries: []rules.DescriptorEntry{{Key: "api_key"}}}},
		rule("blocked", "edge", 0, time.Minute, "remote_address", "50.0.0.5"),
	}, options{})

	all := request("edge",
		desc("remote_address", "10.0.0.1"),
		desc("path", "/x?y", "method", "get"), // no rule: three levels would be needed
		desc("internal", "yes"),
		desc("user", "u1"),
		desc("api_key", "k1"),
		desc("tenant", "t1"))
	none := wantStatus{code: ok}
	unlimited := wantStatus{code: ok, remaining: math.MaxUint32}
	checkResponse(t, "call 1", e.mustCall(all), ok,
		wantStatus{ok, limitOf("per_ip", 3, minute), 2, time.Minute},
		none, unlimited,
		wantStatus{ok, limitOf("", 1, hour), 0, time.Hour},
		wantStatus{ok, limitOf("", 10, second), 19, time.Second},
		wantStatus{ok, limitOf("", 2, minute), 1, time.Minute})

	ev := e.events.last(t)
	if ev.Domain != "edge" || ev.IP != "10.0.0.1" || ev.Endpoint != "/x" || ev.Method != "GET" || len(ev.Descriptors) != 6 {
		t.Fatalf("event: domain %q ip %q endpoint %q method %q, %d descriptors", ev.Domain, ev.IP, ev.Endpoint, ev.Method, len(ev.Descriptors))
	}
	if d := ev.Descriptors[0]; d.RuleID != "per-ip" || d.Code != event.CodeOK {
		t.Errorf("event descriptor 0: %+v", d)
	}
	if d := ev.Descriptors[1]; d.RuleID != "" || d.Code != event.CodeOK || d.Entries[0] != (event.Entry{Key: "path", Value: "/x?y"}) {
		t.Errorf("event descriptor 1: %+v", d)
	}

	// The shadow rule is over its limit, and answers OK.
	checkResponse(t, "call 2", e.mustCall(all), ok,
		wantStatus{ok, limitOf("per_ip", 3, minute), 1, time.Minute},
		none, unlimited,
		wantStatus{ok, limitOf("", 1, hour), 0, time.Hour},
		wantStatus{ok, limitOf("", 10, second), 18, time.Second},
		wantStatus{ok, limitOf("", 2, minute), 0, time.Minute})
	// The tenant's minute limit, its second, binds: OVER_LIMIT overall.
	resp := e.mustCall(all)
	checkResponse(t, "call 3", resp, overLimit,
		wantStatus{ok, limitOf("per_ip", 3, minute), 0, time.Minute},
		none, unlimited,
		wantStatus{ok, limitOf("", 1, hour), 0, time.Hour},
		wantStatus{ok, limitOf("", 10, second), 17, time.Second},
		wantStatus{overLimit, limitOf("", 2, minute), 0, time.Minute})
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("response headers %v without the option", resp.ResponseHeadersToAdd)
	}
	ev = e.events.last(t)
	if ev.Allowed || ev.Descriptors[5].Code != event.CodeOverLimit || ev.Descriptors[3].Code != event.CodeOK || ev.Descriptors[3].RuleID != "shadow" {
		t.Errorf("event of call 3: allowed %v, descriptors %+v", ev.Allowed, ev.Descriptors)
	}
	// One descriptor over its limit makes the call OVER_LIMIT; the others
	// keep their own code.
	checkResponse(t, "call 4", e.mustCall(request("edge", desc("remote_address", "10.0.0.1"), desc("nomatch", "x"))), overLimit,
		wantStatus{overLimit, limitOf("per_ip", 3, minute), 0, time.Minute}, none)
	checkResponse(t, "another address", e.mustCall(request("edge", desc("remote_address", "10.0.0.2"))), ok,
		wantStatus{ok, limitOf("per_ip", 3, minute), 2, time.Minute})
	// An exact value is preferred to a key alone: 0 requests.
	checkResponse(t, "blocked", e.mustCall(request("edge", desc("remote_address", "50.0.0.5"))), overLimit,
		wantStatus{overLimit, limitOf("", 0, minute), 0, time.Minute})
	checkResponse(t, "unknown domain", e.mustCall(request("elsewhere", desc("remote_address", "10.0.0.1"))), ok, none)

	const reqs, descs = "rate_limit_rls_requests_total", "rate_limit_rls_descriptors_total"
	e.wantMetric(reqs, map[string]string{"domain": "edge", "code": "ok"}, 3)
	e.wantMetric(reqs, map[string]string{"domain": "edge", "code": "over_limit"}, 3)
	e.wantMetric(reqs, map[string]string{"domain": "_unknown", "code": "ok"}, 1)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "per-ip", "code": "ok"}, 4)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "per-ip", "code": "over_limit"}, 1)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "shadow", "code": "ok"}, 1)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "shadow", "code": "shadow_over_limit"}, 2)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "internal", "code": "ok"}, 3)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "blocked", "code": "over_limit"}, 1)
	e.wantMetric(descs, map[string]string{"domain": "edge", "descriptor": "_none", "code": "ok"}, 4)
	e.wantMetric(descs, map[string]string{"domain": "_unknown", "descriptor": "_none", "code": "ok"}, 1)
}

// Detailed metrics: the request's values of the levels that ask for it,
// bounded per rule.
func TestDetailedMetricLabels(t *testing.T) {
	r := rule("per-user", "dm", 100, time.Hour, "service", "auth", "user", "")
	r.Descriptor.Entries[1].DetailedMetric = true
	e := newEnv(t, []rules.Rule{r}, options{cfg: rlsapi.Config{MetricValues: 2}})
	for _, u := range []string{"alice", "bob", "carol", "alice"} {
		e.mustCall(request("dm", desc("service", "auth", "user", u)))
	}
	const descs = "rate_limit_rls_descriptors_total"
	e.wantMetric(descs, map[string]string{"descriptor": "per-user.user_alice"}, 2)
	e.wantMetric(descs, map[string]string{"descriptor": "per-user.user_bob"}, 1)
	e.wantMetric(descs, map[string]string{"descriptor": "per-user._other"}, 1)
}

func TestGlobalShadowModeAnswersOK(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("one", "gs", 1, time.Hour, "k", "")}, options{cfg: rlsapi.Config{ShadowMode: true}})
	req := request("gs", desc("k", "a"), desc("other", "b"))
	checkResponse(t, "first", e.mustCall(req), ok, wantStatus{ok, limitOf("", 1, hour), 0, time.Hour}, wantStatus{code: ok})
	// Over the limit: the status says so, the overall code does not.
	checkResponse(t, "second", e.mustCall(req), ok, wantStatus{overLimit, limitOf("", 1, hour), 0, time.Hour}, wantStatus{code: ok})
	if code, body := e.postJSON(`{"domain":"gs","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`); code != 200 || !strings.Contains(body, `"OVER_LIMIT"`) {
		t.Errorf("/json under global shadow mode: %d %s, want 200 with an OVER_LIMIT status", code, body)
	}
	e.wantMetric("rate_limit_rls_shadow_overrides_total", nil, 2)
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"domain": "gs", "code": "over_limit"}, 2)
	if ev := e.events.last(t); ev.Allowed || ev.Descriptors[0].Code != event.CodeOverLimit {
		t.Errorf("the event must tell the real decision: %+v", ev)
	}
}

func TestResponseHeaders(t *testing.T) {
	s := rule("s", "hd", 1, time.Hour, "s", "")
	s.Shadow = true
	e := newEnv(t, []rules.Rule{
		rule("a", "hd", 10, time.Minute, "a", ""),
		rule("b", "hd", 5, time.Hour, "b", ""),
		rule("c", "hd", 5, time.Minute, "c", ""),
		s,
	}, options{cfg: rlsapi.Config{ResponseHeaders: true, RemainingHeader: "X-Left"}})
	headers := func(resp *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	ceilSeconds := func(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
		d := st.DurationUntilReset.AsDuration()
		return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
	}
	// The fewest remaining: b (4 left) rather than a (9 left); the shadow
	// rule (0 left) never shows.
	resp := e.mustCall(request("hd", desc("a", "1"), desc("b", "1"), desc("s", "1")))
	want := map[string]string{"RateLimit-Limit": "5", "X-Left": "4", "RateLimit-Reset": ceilSeconds(resp.Statuses[1])}
	if got := headers(resp); !maps.Equal(got, want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	// A tie on remaining: the longest reset.
	resp = e.mustCall(request("hd", desc("c", "2"), desc("b", "2")))
	longest := resp.Statuses[0]
	if resp.Statuses[1].DurationUntilReset.AsDuration() > longest.DurationUntilReset.AsDuration() {
		longest = resp.Statuses[1]
	}
	want = map[string]string{"RateLimit-Limit": "5", "X-Left": "4", "RateLimit-Reset": ceilSeconds(longest)}
	if got := headers(resp); !maps.Equal(got, want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	// Without a current limit, no headers.
	for _, req := range []*rlsv3.RateLimitRequest{request("hd", desc("zzz", "1")), request("hd", desc("s", "2"))} {
		if resp := e.mustCall(req); len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers %v without a current limit", resp.ResponseHeadersToAdd)
		}
	}
}

// Every call of a descriptor rule is debited, as envoyproxy/ratelimit
// counts: a cost over what is left is refused and counted, and calls are
// refused, checks of hits_addend 0 included, while usage is past the limit.
// A rule with debit: admitted refuses such a cost without counting it.
func TestHitsAddend(t *testing.T) {
	admitted := rule("a", "hits", 10, time.Hour, "m", "")
	admitted.Debit = rules.DebitAdmitted
	e := newEnv(t, []rules.Rule{rule("h", "hits", 10, time.Hour, "k", ""), rule("g", "hits", 10, time.Hour, "g", ""), admitted}, options{})
	lim := limitOf("", 10, hour)
	steps := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		overall rlsv3.RateLimitResponse_Code
		want    []wantStatus
	}{
		{"request hits_addend", &rlsv3.RateLimitRequest{Domain: "hits", HitsAddend: 3, Descriptors: []*ratelimitDescriptor{desc("k", "a")}},
			ok, []wantStatus{{ok, lim, 7, time.Hour}}},
		{"descriptor hits_addend 0 checks without counting", &rlsv3.RateLimitRequest{Domain: "hits", HitsAddend: 5,
			Descriptors: []*ratelimitDescriptor{hits(desc("k", "a"), 0), desc("g", "a")}},
			ok, []wantStatus{{ok, lim, 7, time.Hour}, {ok, lim, 5, time.Hour}}},
		{"request hits_addend 0 is 1", &rlsv3.RateLimitRequest{Domain: "hits", Descriptors: []*ratelimitDescriptor{desc("k", "a")}},
			ok, []wantStatus{{ok, lim, 6, time.Hour}}},
		{"descriptor hits_addend overrides", &rlsv3.RateLimitRequest{Domain: "hits", HitsAddend: 2,
			Descriptors: []*ratelimitDescriptor{hits(desc("k", "a"), 5), desc("g", "a")}},
			ok, []wantStatus{{ok, lim, 1, time.Hour}, {ok, lim, 3, time.Hour}}},
		{"a cost over what is left is refused, and counted", &rlsv3.RateLimitRequest{Domain: "hits",
			Descriptors: []*ratelimitDescriptor{hits(desc("k", "a"), 2)}},
			overLimit, []wantStatus{{overLimit, lim, 0, time.Hour}}},
		{"a check past the limit is over it", &rlsv3.RateLimitRequest{Domain: "hits",
			Descriptors: []*ratelimitDescriptor{hits(desc("k", "a"), 0)}},
			overLimit, []wantStatus{{overLimit, lim, 0, time.Hour}}},
		{"the whole budget", &rlsv3.RateLimitRequest{Domain: "hits", Descriptors: []*ratelimitDescriptor{hits(desc("k", "b"), 10)}},
			ok, []wantStatus{{ok, lim, 0, time.Hour}}},
		{"a check at the limit is not over it", &rlsv3.RateLimitRequest{Domain: "hits",
			Descriptors: []*ratelimitDescriptor{hits(desc("k", "b"), 0)}},
			ok, []wantStatus{{ok, lim, 0, time.Hour}}},
		{"past it", &rlsv3.RateLimitRequest{Domain: "hits", Descriptors: []*ratelimitDescriptor{desc("k", "b")}},
			overLimit, []wantStatus{{overLimit, lim, 0, time.Hour}}},
		{"debit admitted: 9 of 10", &rlsv3.RateLimitRequest{Domain: "hits", Descriptors: []*ratelimitDescriptor{hits(desc("m", "a"), 9)}},
			ok, []wantStatus{{ok, lim, 1, time.Hour}}},
		{"debit admitted: a cost over what is left is refused, and not counted", &rlsv3.RateLimitRequest{Domain: "hits",
			Descriptors: []*ratelimitDescriptor{hits(desc("m", "a"), 2)}},
			overLimit, []wantStatus{{overLimit, lim, 1, time.Hour}}},
		{"debit admitted: the last unit", &rlsv3.RateLimitRequest{Domain: "hits", Descriptors: []*ratelimitDescriptor{desc("m", "a")}},
			ok, []wantStatus{{ok, lim, 0, time.Hour}}},
	}
	for _, s := range steps {
		checkResponse(t, s.name, e.mustCall(s.req), s.overall, s.want...)
	}
}

func TestInvalidRequests(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("v", "val", 10, time.Hour, "k", "")}, options{})
	long := strings.Repeat("v", 1025)
	var tooMany []*ratelimitDescriptor
	for range event.MaxDescriptors + 1 {
		tooMany = append(tooMany, desc("k", "v"))
	}
	tests := []struct {
		req   *rlsv3.RateLimitRequest
		msg   string
		field string
	}{
		{request("", desc("k", "v")), "domain: required", "domain"},
		{request("val"), "descriptors: at least one required", "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "val", Descriptors: tooMany}, "descriptors: 65, at most 64", "descriptors"},
		{request("val", desc("k", "v"), desc()), "descriptors[1].entries: at least one required", "entries"},
		{request("val", desc("k", "v"), desc("k", "v"), desc("", "v")), "descriptors[2].entries[0].key: empty", "key"},
		{request("val", desc("k", "v", "k2", long)), "descriptors[0].entries[1].value: longer than 1024 bytes", "value"},
		{request("val", desc("k", "a\x00")), "descriptors[0].entries[0].value: not UTF-8 without control characters", "value"},
		{request("val", hits(desc("k", "v"), 1<<32)), "descriptors[0].hits_addend: 4294967296, at most 4294967295", "hits_addend"},
	}
	for _, tt := range tests {
		_, err := e.call(tt.req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tt.msg {
			t.Errorf("%s: got %v, want InvalidArgument %q", tt.field, err, tt.msg)
		}
	}
	for field, n := range map[string]float64{"domain": 1, "descriptors": 2, "entries": 1, "key": 1, "value": 2, "hits_addend": 1, "body": 0} {
		e.wantMetric("rate_limit_rls_invalid_requests_total", map[string]string{"field": field}, n)
	}
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"domain": "val", "code": "invalid"}, 7)
	// An empty value is a value.
	checkResponse(t, "empty value", e.mustCall(request("val", desc("k", ""))), ok, wantStatus{ok, limitOf("", 10, hour), 9, time.Hour})
	if n := e.events.len(); n != 1 {
		t.Errorf("%d events, want 1: an invalid request is not decided", n)
	}
	// A message over the receive bound is refused before it is decoded.
	var big []*ratelimitDescriptor
	for range 64 {
		big = append(big, desc("k", strings.Repeat("v", 1024)))
	}
	if _, err := e.call(&rlsv3.RateLimitRequest{Domain: "val", Descriptors: big}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a message of 64 KiB+: %v, want ResourceExhausted", err)
	}
}

// A descriptor's own limit decides it as envoyproxy/ratelimit applies one:
// in place of the rule it matches, whose counter it shares (the counter is
// the descriptor's, not the limit's), or alone when it matches none; every
// call is counted; never in a domain without rules; 0 requests denies; a
// limit of unknown unit is an invalid request.
func TestDescriptorLimitOverride(t *testing.T) {
	testkit.AvoidWindowEnd(t, time.Minute, 15*time.Second) // the override of a minute counts its two calls
	e := newEnv(t, []rules.Rule{rule("o", "ovr", 10, time.Hour, "k", "")}, options{})
	withLimit := func(d *ratelimitDescriptor, n uint32, unit typev3.RateLimitUnit) *ratelimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	req := func(domain string, d *ratelimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitDescriptor{d}}
	}
	two, one := limitOf("", 2, hour), limitOf("", 1, minute)
	steps := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		overall rlsv3.RateLimitResponse_Code
		want    []wantStatus
	}{
		{"in place of the rule", req("ovr", withLimit(desc("k", "a"), 2, typev3.RateLimitUnit_HOUR)), ok, []wantStatus{{ok, two, 1, time.Hour}}},
		{"its second", req("ovr", withLimit(desc("k", "a"), 2, typev3.RateLimitUnit_HOUR)), ok, []wantStatus{{ok, two, 0, time.Hour}}},
		{"past it, counted", req("ovr", withLimit(desc("k", "a"), 2, typev3.RateLimitUnit_HOUR)), overLimit, []wantStatus{{overLimit, two, 0, time.Hour}}},
		{"the rule's own limit on the same counter", req("ovr", desc("k", "a")), ok, []wantStatus{{ok, limitOf("", 10, hour), 6, time.Hour}}},
		{"no rule matches: the limit alone", req("ovr", withLimit(desc("z", "x"), 1, typev3.RateLimitUnit_MINUTE)), ok, []wantStatus{{ok, one, 0, time.Minute}}},
		{"no rule matches: past it", req("ovr", withLimit(desc("z", "x"), 1, typev3.RateLimitUnit_MINUTE)), overLimit, []wantStatus{{overLimit, one, 0, time.Minute}}},
		{"0 requests denies", req("ovr", withLimit(desc("z", "y"), 0, typev3.RateLimitUnit_SECOND)), overLimit,
			[]wantStatus{{overLimit, limitOf("", 0, second), 0, time.Second}}},
		{"a domain without rules", req("nope", withLimit(desc("k", "a"), 1, typev3.RateLimitUnit_HOUR)), ok, []wantStatus{{ok, nil, 0, 0}}},
	}
	for _, s := range steps {
		checkResponse(t, s.name, e.mustCall(s.req), s.overall, s.want...)
	}
	if _, err := e.call(req("ovr", withLimit(desc("k", "a"), 5, typev3.RateLimitUnit_UNKNOWN))); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unit UNKNOWN: %v, want INVALID_ARGUMENT", err)
	}
}
