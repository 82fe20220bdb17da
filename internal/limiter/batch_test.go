package limiter

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// TestCheckBatchEqualsChecksInTurn runs the same random traffic through
// two services deciding in the reference model, one request at a time and
// in batches of 1 to 20 made at one instant: every decision must be the
// same, every decision an event, and a batch one round trip.
func TestCheckBatchEqualsChecksInTurn(t *testing.T) {
	set := compileRules(t, cacheRules)
	clock := &fakeClock{now: time.Now()}
	newSvc := func() (*Service, *modelDecider, *capturePublisher) {
		decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
		pub := &capturePublisher{}
		return New(Config{Instance: "test", Now: clock.Now}, set, OpaqueErrors(decider), pub, zap.NewNop(), prometheus.NewRegistry()), decider, pub
	}
	inTurn, _, inTurnEvents := newSvc()
	batched, batchedDecider, batchedEvents := newSvc()

	rng := rand.New(rand.NewPCG(11, 11))
	endpoints := []string{"/a/1", "/b", "/c", "/d", "/e", "/none"}
	var one Decision
	var b Batch
	decisions, batches := 0, 0
	for step := range 1000 {
		clock.advance(time.Duration(rng.IntN(200)) * time.Millisecond)
		reqs := make([]rules.Request, 1+rng.IntN(20))
		for i := range reqs {
			reqs[i] = rules.Request{IP: "10.0.0." + strconv.Itoa(rng.IntN(3)), Endpoint: endpoints[rng.IntN(len(endpoints))],
				Method: "GET", Cost: 1 + int64(rng.IntN(3)/2)}
		}
		batched.CheckBatch(context.Background(), reqs, &b)
		if len(b.Decisions) != len(reqs) {
			t.Fatalf("step %d: %d decisions for %d requests", step, len(b.Decisions), len(reqs))
		}
		for i := range reqs {
			inTurn.Check(context.Background(), &reqs[i], &one)
			got := &b.Decisions[i]
			if one.Allowed != got.Allowed || one.Reason != got.Reason || one.RuleID != got.RuleID || one.Limit != got.Limit ||
				one.Remaining != got.Remaining || one.ResetAfter != got.ResetAfter || one.RetryAfter != got.RetryAfter ||
				one.Shadow != got.Shadow || one.Mode != got.Mode || got.EventID == "" {
				t.Fatalf("step %d request %d %+v:\nin turn  %v %s rule=%s remaining=%d retry=%v\nin batch %v %s rule=%s remaining=%d retry=%v id=%q",
					step, i, reqs[i], one.Allowed, one.Reason, one.RuleID, one.Remaining, one.RetryAfter,
					got.Allowed, got.Reason, got.RuleID, got.Remaining, got.RetryAfter, got.EventID)
			}
		}
		decisions += len(reqs)
		batches++
	}
	if n, m := len(inTurnEvents.events), len(batchedEvents.events); n != decisions || m != decisions {
		t.Fatalf("events: %d in turn, %d batched; want %d each", n, m, decisions)
	}
	if batchedDecider.trips == 0 || batchedDecider.trips > batches {
		t.Fatalf("%d Decide calls for %d batches: a batch must share one", batchedDecider.trips, batches)
	}
}

// reportRules are rules spent by reports, of several algorithms: failures
// per address and per user, units used per address.
const reportRules = `
rules:
  - id: failures-per-ip
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 6, per: 2s}]
    spent_by: report
    statuses: [401, 403]
  - id: failures-per-user
    match: {endpoints: ["/login"]}
    key: [user_id]
    algorithm: fixed_window
    limits: [{requests: 4, per: 1s}]
    spent_by: report
    statuses: [401]
  - id: units
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 20, per: 1s, burst: 40}]
    spent_by: report
`

// TestReportBatchEqualsReportsInTurn is TestCheckBatchEqualsChecksInTurn
// for reports: the same random reports, one at a time and in batches of 1
// to 20 made at one instant, debit the same rules with the same results,
// each is an outcome event, and a batch is one round trip.
func TestReportBatchEqualsReportsInTurn(t *testing.T) {
	set := compileRules(t, reportRules)
	clock := &fakeClock{now: time.Now()}
	newSvc := func() (*Service, *modelDecider, *capturePublisher) {
		decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
		pub := &capturePublisher{}
		return New(Config{Instance: "test", Now: clock.Now, Outcomes: pub}, set, OpaqueErrors(decider), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry()),
			decider, pub
	}
	inTurn, _, inTurnEvents := newSvc()
	batched, batchedDecider, batchedEvents := newSvc()

	rng := rand.New(rand.NewPCG(12, 12))
	endpoints := []string{"/login", "/login", "/other"}
	statuses := []int{200, 401, 403, 404}
	var one Decision
	var b Batch
	reports, batches, debits, spent := 0, 0, 0, 0
	for step := range 1000 {
		clock.advance(time.Duration(rng.IntN(200)) * time.Millisecond)
		rs := make([]Report, 1+rng.IntN(20))
		for i := range rs {
			rs[i] = Report{Request: rules.Request{IP: "10.0.0." + strconv.Itoa(rng.IntN(3)), UserID: "u" + strconv.Itoa(rng.IntN(3)),
				Endpoint: endpoints[rng.IntN(len(endpoints))], Method: "POST", Cost: int64(rng.IntN(4))}, Status: statuses[rng.IntN(len(statuses))]}
		}
		batched.ReportBatch(context.Background(), rs, &b)
		if len(b.Decisions) != len(rs) {
			t.Fatalf("step %d: %d answers for %d reports", step, len(b.Decisions), len(rs))
		}
		for i := range rs {
			inTurn.Report(context.Background(), &rs[i].Request, rs[i].Status, &one)
			got := &b.Decisions[i]
			if !sameDebits(&one, got) || got.EventID == "" || !got.Allowed || got.Mode != one.Mode {
				t.Fatalf("step %d report %d %+v:\nin turn  %+v %+v\nin batch %+v %+v id=%q",
					step, i, rs[i], one.Applied, one.Results, got.Applied, got.Results, got.EventID)
			}
			debits += len(got.Results)
			for _, r := range got.Results {
				if r.Remaining <= 0 {
					spent++
				}
			}
		}
		reports += len(rs)
		batches++
	}
	if debits < reports/2 || spent == 0 {
		t.Fatalf("%d debits (%d spent) for %d reports: the traffic must debit, and spend budgets", debits, spent, reports)
	}
	if n, m := len(inTurnEvents.events), len(batchedEvents.events); n != reports || m != reports {
		t.Fatalf("outcome events: %d in turn, %d batched; want %d each", n, m, reports)
	}
	if batchedDecider.trips == 0 || batchedDecider.trips > batches {
		t.Fatalf("%d Decide calls for %d batches: a batch must share one", batchedDecider.trips, batches)
	}
}

// sameDebits reports whether two reports debited the same rules with the
// same results.
func sameDebits(a, b *Decision) bool {
	if len(a.Applied) != len(b.Applied) || len(a.Results) != len(b.Results) {
		return false
	}
	for i := range a.Applied {
		if a.Applied[i].Rule.ID != b.Applied[i].Rule.ID || a.Results[i] != b.Results[i] {
			return false
		}
	}
	return true
}
