package limiter

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// lateReply is a Decider error of a submission answered before its reply
// came, as redisstore.LateError: it records what the service settles.
type lateReply struct {
	mu      sync.Mutex
	settled [][3]int // from, to, 1 when admitted
}

func (*lateReply) Error() string { return "reply late" }

func (l *lateReply) Settle(from, to int, admitted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := 0
	if admitted {
		a = 1
	}
	l.settled = append(l.settled, [3]int{from, to, a})
}

// SettlePaid is recorded as 2 in the third place.
func (l *lateReply) SettlePaid(from, to int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled = append(l.settled, [3]int{from, to, 2})
}

func (l *lateReply) take() [][3]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.settled
	l.settled = nil
	return s
}

// When a round trip's reply comes too late, the service tells the Decider
// what it did with each request: a request it refused (a local rule, which
// refuses what Redis may have counted; a deny rule's 503) gets back what
// Redis admitted, a request it served (an allow rule) keeps it.
func TestLateRepliesAreSettled(t *testing.T) {
	f := newModeFixture(t, false)
	late := &lateReply{}
	f.decider.err = late
	f.decider.set(true)
	for _, tc := range []struct {
		endpoint string
		want     [][3]int
	}{
		{"/local", [][3]int{{0, 1, 0}}},
		{"/allow", [][3]int{{0, 1, 1}}},
		{"/deny", [][3]int{{0, 1, 0}}},
	} {
		d := f.check(tc.endpoint, "192.0.2.1")
		if got := late.take(); !slices.Equal(got, tc.want) {
			t.Errorf("%s (allowed %v, unavailable %v): settled %v, want %v", tc.endpoint, d.Allowed, d.Unavailable, got, tc.want)
		}
	}

	var b Batch
	f.svc.CheckBatch(context.Background(), []rules.Request{
		{IP: "192.0.2.2", Endpoint: "/allow", Method: "GET", Cost: 1},
		{IP: "192.0.2.3", Endpoint: "/nothing", Method: "GET", Cost: 1}, // no rule: no call
		{IP: "192.0.2.4", Endpoint: "/local", Method: "GET", Cost: 1},
	}, &b)
	if got, want := late.take(), [][3]int{{0, 1, 1}, {1, 2, 0}}; !slices.Equal(got, want) {
		t.Errorf("batch: settled %v, want %v (each request's calls by their place in the submission)", got, want)
	}
}

// raceDecider answers a call asking for a lease in time with a grant, once
// released, and every other call late: the grant lands while a plain call
// of the same key is out.
type raceDecider struct {
	late    *lateReply
	asked   chan struct{} // closed when the lease request is out
	release chan struct{} // lets it answer
	settled chan struct{} // closed once its answer is settled
}

func (r *raceDecider) Decide(_ context.Context, calls []decide.Call) ([]decide.Result, error) {
	if calls[0].Lease != (decide.Lease{}) {
		close(r.asked)
		<-r.release
		q := calls[0].Limits[0].Quota()
		return []decide.Result{{Allowed: true, Limit: q, Remaining: q - 6, Granted: 5,
			LeaseUntil: time.Now().Add(time.Hour).UnixMilli(), LeaseFor: time.Hour}}, nil
	}
	if r.release == nil { // warming the key: answered in time, nothing lent
		q := calls[0].Limits[0].Quota()
		return []decide.Result{{Allowed: true, Limit: q, Remaining: q - 1}}, nil
	}
	close(r.release)
	<-r.settled
	return nil, r.late
}

// A request whose round trip times out may be admitted from a lease a
// concurrent answer brought meanwhile (the fallback spends a lease in hand
// first): then what Redis counted for its own call goes back, or the key
// pays for the request twice, once in the lease and once in Redis.
func TestLateCallServedByLeaseGoesBack(t *testing.T) {
	set := compileRules(t, `
rules:
  - {id: leased, match: {endpoints: ["/leased"]}, key: [ip], algorithm: fixed_window,
     limits: [{requests: 100, per: 1h}], lease: {max_units: 10}, on_redis_failure: local}
`)
	r := &raceDecider{late: &lateReply{}, asked: make(chan struct{}), settled: make(chan struct{})}
	svc := New(Config{Instance: "test", Lease: lease.Config{HotUnits: 2, Horizon: time.Hour}},
		set, fakeErrors{Backend: OpaqueErrors(r)}, nopPublisher{}, zap.NewNop(), prometheus.NewRegistry())
	check := func() *Decision {
		d := new(Decision)
		svc.Check(context.Background(), &rules.Request{IP: "192.0.2.9", Endpoint: "/leased", Method: "GET", Cost: 1}, d)
		return d
	}
	check() // the key turns hot: the next call asks for a lease
	r.release = make(chan struct{})
	go func() {
		defer close(r.settled)
		if d := check(); !d.Allowed {
			t.Error("the call asking for the lease was refused")
		}
	}()
	<-r.asked
	d := check() // a plain call: the key's lease request is out
	if !d.Allowed {
		t.Fatal("the late call was refused: the lease that landed meanwhile should have served it")
	}
	if got, want := r.late.take(), [][3]int{{0, 1, 2}}; !slices.Equal(got, want) {
		t.Errorf("settled %v, want %v: the lease paid for the request, Redis's count of its call must go back", got, want)
	}
}
