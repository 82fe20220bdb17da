package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// upHealth answers every heartbeat: Redis is up, one live limiter.
type upHealth struct{}

func (upHealth) Beat(context.Context, time.Time) (int, error) { return 1, nil }

// A reservation taken in memory while Redis was away, and reported once
// the limiter decides in Redis again, is unknown to Redis: the report's
// cost must still reach Redis's budget, once, and the reservation be
// gone from memory. Before, the cost was counted nowhere.
func TestReservationTakenInMemorySettledAfterRecovery(t *testing.T) {
	addr := redistest.StartServer(t)
	var offset atomic.Int64 // the limiter's clock runs ahead of the wall clock by this
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	svc, reg := reserveService(t, addr, "rwreserveo:", limiter.Config{
		Now: now, Health: upHealth{}, HealthInterval: time.Millisecond,
		Mode: limiter.ModeConfig{RecoverAfter: time.Second},
	})
	svc.RedisDown("test")
	d := check(svc, chatReq("k-1", "10.0.0.1", "/chat/1", 1))
	batched := check(svc, chatReq("k-1", "10.0.0.2", "/chat/1", 1))
	for _, d := range []*limiter.Decision{d, batched} {
		if d.Mode != limiter.ModeLocal || !d.Allowed || d.Hold == "" {
			t.Fatalf("local check: mode %s, allowed %v, hold %q", d.Mode, d.Allowed, d.Hold)
		}
	}
	svc.Start()
	t.Cleanup(svc.Stop)
	offset.Store(int64(2 * time.Second)) // past RecoverAfter of healthy heartbeats
	testkit.WaitFor(t, 10*time.Second, "the limiter back in redis mode", func() bool { return svc.Mode() == limiter.ModeRedis })

	settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.1", "/chat/1", 500), d.Hold)
	if !settled || left != 500 {
		t.Fatalf("report of 500 on a reservation taken in memory: settled %v, %d left in Redis; want true, 500", settled, left)
	}
	if settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.1", "/chat/1", 500), d.Hold); settled || left != 500 {
		t.Fatalf("the same report again: settled %v, %d left; want false, 500 (settled once)", settled, left)
	}
	// The same through a batch of reports.
	var b limiter.Batch
	svc.ReportBatch(context.Background(), []limiter.Report{{Request: *chatReq("k-1", "10.0.0.2", "/chat/1", 300), Status: 200, Hold: batched.Hold}}, &b)
	if r := b.Decisions[0].Results[0]; !r.Settled || r.Remaining != 200 {
		t.Fatalf("batched report of 300: settled %v, %d left in Redis; want true, 200", r.Settled, r.Remaining)
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_reservations_total", map[string]string{"result": "settled"}); got != 2 {
		t.Fatalf("settled reservations: %v, want 2", got)
	}
}
