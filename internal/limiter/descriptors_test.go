package limiter

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Descriptor rules written in the rules file's own form (the RLS config
// files compile to the same rules).
const descriptorRules = `
rules:
  - id: per-ip
    descriptor: {domain: edge, entries: [{key: remote_address}]}
    algorithm: fixed_window
    limits: [{requests: 3, per: 1m}]
  - id: blocked-ip
    descriptor: {domain: edge, entries: [{key: remote_address, value: 50.0.0.5}]}
    algorithm: fixed_window
    limits: [{requests: 0, per: 1s}]
  - id: ldap
    descriptor: {domain: edge, entries: [{key: ldap}], unlimited: true}
    algorithm: fixed_window
  - id: marketing
    descriptor: {domain: edge, entries: [{key: message_type, value: marketing}, {key: to_number}], name: marketing}
    algorithm: sliding_window
    limits: [{requests: 2, per: 1h}]
  - id: vip
    descriptor: {domain: edge, entries: [{key: to_number, value: "555*"}], replaces: [marketing]}
    algorithm: token_bucket
    limits: [{rate: 1, per: 1s, burst: 5}]
  - id: http-rule
    match: {endpoints: ["/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1m}]
`

func newDescriptorService(t *testing.T, bans *BanSet) (*Service, *modelDecider, *capturePublisher) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
	pub := &capturePublisher{}
	svc := New(Config{Instance: "test", Now: clock.Now, Bans: bans},
		compileRules(t, descriptorRules), OpaqueErrors(decider), pub, zap.NewNop(), prometheus.NewRegistry())
	return svc, decider, pub
}

func descriptorRequest(ip string, descs ...[]rules.Entry) *rules.DescriptorRequest {
	req := &rules.DescriptorRequest{Domain: "edge", Endpoint: "/"}
	if ip != "" {
		req.Addr = netip.MustParseAddr(ip)
		req.IP = req.Addr.String()
	}
	for _, e := range descs {
		req.Descriptors = append(req.Descriptors, rules.Descriptor{Entries: e, Cost: 1})
	}
	return req
}

func ip(v string) []rules.Entry { return []rules.Entry{{Key: "remote_address", Value: v}} }

// outcome maps each descriptor index to the rule that decided it and
// whether it was admitted.
func outcome(d *Decision) map[int]string {
	out := map[int]string{}
	for i, a := range d.Applied {
		verdict := "ok"
		if !d.Results[i].Allowed {
			verdict = "over"
		}
		out[a.Descriptor] = a.Rule.ID + ":" + verdict
	}
	return out
}

func TestCheckDescriptorsDecidesEachDescriptor(t *testing.T) {
	svc, decider, pub := newDescriptorService(t, nil)
	ctx := context.Background()
	d := new(Decision)
	// The 4th request of 203.0.113.7 is over per-ip's 3 a minute; an
	// unknown key matches nothing; ldap is unlimited.
	for range 3 {
		svc.CheckDescriptors(ctx, descriptorRequest("203.0.113.7", ip("203.0.113.7")), d)
		if !d.Allowed {
			t.Fatalf("denied within the limit: %+v", d)
		}
	}
	svc.CheckDescriptors(ctx, descriptorRequest("203.0.113.7", ip("203.0.113.7"),
		[]rules.Entry{{Key: "unknown", Value: "x"}}, []rules.Entry{{Key: "ldap", Value: "cn=a"}}), d)
	got := outcome(d)
	if d.Allowed || d.Reason != event.ReasonRateLimited || len(got) != 2 || got[0] != "per-ip:over" || got[2] != "ldap:ok" {
		t.Fatalf("allowed=%v reason=%s outcome %v; want per-ip over, nothing for descriptor 1, ldap ok", d.Allowed, d.Reason, got)
	}
	if trips := decider.calls; trips != 4 { // ldap never reaches Redis
		t.Errorf("%d calls reached Redis, want 4", trips)
	}

	ev := lastEvent(t, pub)
	if ev.Domain != "edge" || len(ev.Descriptors) != 3 || ev.IP != "203.0.113.7" || ev.Reason != event.ReasonRateLimited {
		t.Fatalf("event %+v", ev)
	}
	for i, want := range []event.Descriptor{
		{RuleID: "per-ip", Code: event.CodeOverLimit}, {RuleID: "", Code: event.CodeOK}, {RuleID: "ldap", Code: event.CodeOK},
	} {
		if g := ev.Descriptors[i]; g.RuleID != want.RuleID || g.Code != want.Code || len(g.Entries) != 1 {
			t.Errorf("event descriptor %d: %+v, want %+v", i, g, want)
		}
	}
}

// requests_per_unit: 0 denies without a round trip, the most specific
// value winning over the key alone; replaces drops the replaced rule.
func TestCheckDescriptorsBlockingAndReplaces(t *testing.T) {
	svc, decider, _ := newDescriptorService(t, nil)
	ctx := context.Background()
	d := new(Decision)
	svc.CheckDescriptors(ctx, descriptorRequest("50.0.0.5", ip("50.0.0.5")), d)
	if got := outcome(d); d.Allowed || got[0] != "blocked-ip:over" || decider.calls != 0 {
		t.Fatalf("allowed=%v outcome %v after %d round trips; want blocked-ip over without Redis", d.Allowed, got, decider.calls)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > time.Second {
		t.Errorf("retry after %v, want the rest of the 1s window", d.RetryAfter)
	}

	marketing := []rules.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "5551234"}}
	vip := []rules.Entry{{Key: "to_number", Value: "5551234"}}
	svc.CheckDescriptors(ctx, descriptorRequest("", marketing, vip), d)
	if got := outcome(d); len(got) != 1 || got[1] != "vip:ok" {
		t.Fatalf("outcome %v; want vip alone (marketing replaced)", got)
	}
	svc.CheckDescriptors(ctx, descriptorRequest("", marketing), d)
	if got := outcome(d); got[0] != "marketing:ok" {
		t.Fatalf("outcome %v; want marketing when vip does not match", got)
	}
}

// A banned client address is OVER_LIMIT for every descriptor, decided
// without Redis; an event without a client address carries 0.0.0.0.
func TestCheckDescriptorsBansAndAddresslessEvents(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	bans := NewBanSet(prometheus.NewRegistry())
	bans.Apply(event.ActionBan, event.ScopeIP, "203.0.113.9", now.Add(time.Hour))
	svc, decider, pub := newDescriptorService(t, bans)
	ctx := context.Background()
	d := new(Decision)
	svc.CheckDescriptors(ctx, descriptorRequest("203.0.113.9", ip("203.0.113.9"), []rules.Entry{{Key: "ldap", Value: "x"}}), d)
	ev := lastEvent(t, pub)
	if d.Allowed || d.Reason != event.ReasonBanned || decider.calls != 0 {
		t.Fatalf("allowed=%v reason=%s after %d round trips; want banned without Redis", d.Allowed, d.Reason, decider.calls)
	}
	for i, desc := range ev.Descriptors {
		if desc.Code != event.CodeOverLimit {
			t.Errorf("banned event descriptor %d: %+v, want OVER_LIMIT", i, desc)
		}
	}

	svc.CheckDescriptors(ctx, descriptorRequest("", []rules.Entry{{Key: "ldap", Value: "x"}}), d)
	if ev := lastEvent(t, pub); ev.IP != unknownAddr || !d.Allowed {
		t.Fatalf("addressless event ip %q allowed=%v", ev.IP, d.Allowed)
	}
}

// With Redis down, descriptor rules follow their failure policy (local by
// default), and the rules answered without Redis answer as before.
func TestCheckDescriptorsWhileRedisIsDown(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	decider := &fakeDecider{down: true}
	svc := New(Config{Instance: "test", Now: clock.Now}, compileRules(t, descriptorRules), fakeErrors{Backend: OpaqueErrors(decider)},
		&capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
	ctx := context.Background()
	d := new(Decision)
	admitted := 0
	for range 5 {
		svc.CheckDescriptors(ctx, descriptorRequest("203.0.113.7", ip("203.0.113.7"),
			[]rules.Entry{{Key: "ldap", Value: "x"}}, ip("50.0.0.5")), d)
		if got := outcome(d); got[0] == "per-ip:ok" {
			admitted++
		}
		if got := outcome(d); got[1] != "ldap:ok" || got[2] != "blocked-ip:over" {
			t.Fatalf("outcome %v in mode %s", got, d.Mode)
		}
	}
	if admitted != 3 {
		t.Fatalf("local mode admitted %d of per-ip's 3", admitted)
	}
}

// HTTP rules never apply to descriptors, nor descriptor rules to HTTP
// requests.
func TestDescriptorAndRequestRulesStayApart(t *testing.T) {
	svc, _, _ := newDescriptorService(t, nil)
	ctx := context.Background()
	d := new(Decision)
	a := netip.MustParseAddr("203.0.113.7")
	svc.Check(ctx, &rules.Request{IP: a.String(), Addr: a, Endpoint: "/x", Method: "GET", Cost: 1}, d)
	if len(d.Applied) != 1 || d.Applied[0].Rule.ID != "http-rule" {
		t.Fatalf("HTTP request applied %v", outcome(d))
	}
	svc.CheckDescriptors(ctx, descriptorRequest("203.0.113.7", []rules.Entry{{Key: "other", Value: "x"}}), d)
	if len(d.Applied) != 0 || d.Reason != event.ReasonNoRule {
		t.Fatalf("descriptor request applied %v (%s)", outcome(d), d.Reason)
	}
}

func lastEvent(t *testing.T, pub *capturePublisher) event.Decision {
	t.Helper()
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.events) == 0 {
		t.Fatal("no event published")
	}
	ev, err := event.DecodeDecision(pub.events[len(pub.events)-1])
	if err != nil {
		t.Fatalf("the event does not decode: %v", err)
	}
	return ev
}

// The slices an event's descriptors are built in are cleared once the
// event is published: a pooled decision keeps no request's strings.
func TestDescriptorEventSlicesCleared(t *testing.T) {
	svc := New(Config{Instance: "test"}, compileRules(t, descriptorRules), OpaqueErrors(&fakeDecider{}), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
	var d Decision
	req := &rules.DescriptorRequest{Domain: "edge", IP: "203.0.113.7", Addr: netip.MustParseAddr("203.0.113.7"), Endpoint: "/",
		Descriptors: []rules.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "203.0.113.7"}}, Cost: 1},
			{Entries: []rules.Entry{{Key: "path", Value: "/a"}, {Key: "method", Value: "GET"}}, Cost: 1}}}
	svc.CheckDescriptors(context.Background(), req, &d)
	if len(d.eventDescs) != 2 || len(d.eventEntries) != 3 {
		t.Fatalf("event slices %d and %d long, want 2 and 3", len(d.eventDescs), len(d.eventEntries))
	}
	for _, e := range d.eventEntries {
		if e != (event.Entry{}) {
			t.Errorf("entry %+v kept after the event was published", e)
		}
	}
	for _, desc := range d.eventDescs {
		if desc.Entries != nil || desc.RuleID != "" {
			t.Errorf("descriptor %+v kept after the event was published", desc)
		}
	}
}
