package limiter

import (
	"context"
	"slices"
	"sync"
	"testing"

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
