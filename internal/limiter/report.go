package limiter

import (
	"context"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// ReleaseOnly is the status of a report that only releases its hold
// (ReportHold): no outcome, since the application declined to report one.
// It spends no budget, settles no reservation (a reservation under the id
// lapses, its estimate spent, as one never reported), publishes no outcome
// event and is not counted as a report.
const ReleaseOnly = 0

// Report is one outcome report of ReportBatch: the request it is about,
// normalized as for Check (Cost is the units the request used), and the
// status its client got.
type Report struct {
	Request rules.Request
	Status  int
	// Hold, when set, is the hold id the request's check answered
	// (Decision.Hold): the report releases it (see ReportHold).
	Hold string
}

// Report records an outcome report: what happened after the response to
// req (normalized as for Check; Cost is the units the request used), whose
// client got status. It debits the rules the report spends
// (rules.Set.MatchReport) into d (reset first) and publishes the outcome
// event on the outcomes publisher. A report is never refused: d.Applied and
// d.Results tell, rule by rule, what is left of each budget (Remaining 0:
// spent, the rule's checks are refused until the window frees a unit).
//
// What the subject is decides what the report may spend. A banned client
// IP spends nothing: its failure is most likely the ban's own refusal (its
// event says banned, and the detector does not count it); neither does an
// exempt address or endpoint. A banned (locked) or exempt account spends
// only the rules not keyed by user_id: its own budgets stop, while the
// address that fails on it keeps paying for its failures (its event says
// user_banned for a locked account, and the detector still counts it
// against the address). When Redis cannot be reached, the rules
// whose on_redis_failure is local are debited in memory and the others are
// not debited; d.Results is then empty if any of them is deny.
func (s *Service) Report(ctx context.Context, req *rules.Request, status int, d *Decision) {
	s.ReportHold(ctx, req, status, "", d)
}

// ReportHold records an outcome report as Report does and, when hold is
// set (a well-formed id, decide.ValidHoldID), releases the hold of that id
// on the key of every concurrency rule that applies to req, in the same
// round trip. d.Applied has one entry per release (Call.Release), whose
// result says whether it ended a hold (decide.Result.Released): false when
// the key holds no such hold (unknown, released already, lapsed, or taken
// on another key), which changes nothing. Releases are made whatever the
// subject: a ban or an exemption spends nothing, and ends the holds its
// checks took all the same.
func (s *Service) ReportHold(ctx context.Context, req *rules.Request, status int, hold string, d *Decision) {
	start := s.cfg.Now()
	set := s.rules.Load()
	if s.matchReportHold(set, req, status, hold, d, start) {
		s.decide(ctx, d, start)
	}
	s.countReleases(d)
	s.countSettles(d)
	s.completeReport(req, status, hold, d, start)
}

// matchReportHold is matchReport, with the settles of hold's reservations,
// followed by the releases of hold.
func (s *Service) matchReportHold(set *ruleSet, req *rules.Request, status int, hold string, d *Decision, now time.Time) bool {
	if status == ReleaseOnly {
		d.Reset()
		d.report = true
		d.Mode = s.Mode()
		s.keyUser(set, req)
	} else {
		s.matchReport(set, req, status, hold, d, now)
	}
	if hold != "" {
		d.Applied = set.MatchHolds(req, hold, now, d.Applied)
	}
	return len(d.Applied) > 0
}

// ReportBatch records every report of reports as Report would, one after
// the other, into b.Decisions (at the same index), except that the Redis
// calls of all of them go in one submission to the Decider, as CheckBatch's
// do: one round trip per Redis node for the batch.
func (s *Service) ReportBatch(ctx context.Context, reports []Report, b *Batch) {
	start := s.cfg.Now()
	set := s.rules.Load()
	b.Decisions = grow(b.Decisions, len(reports))
	b.calls = b.calls[:0]
	for i := range reports {
		d := &b.Decisions[i]
		r := &reports[i]
		if s.matchReportHold(set, &r.Request, r.Status, r.Hold, d, start) && s.prepare(d, start) {
			b.calls = append(b.calls, d.calls...)
		}
	}
	s.decideBatch(ctx, b, start)
	for i := range reports {
		s.countReleases(&b.Decisions[i])
		s.countSettles(&b.Decisions[i])
		s.completeReport(&reports[i].Request, reports[i].Status, reports[i].Hold, &b.Decisions[i], start)
	}
}

// matchReport resets d and puts in d.Applied the rules the report spends
// (see Report); it reports whether there are any.
func (s *Service) matchReport(set *ruleSet, req *rules.Request, status int, hold string, d *Decision, now time.Time) bool {
	d.Reset()
	d.report = true
	d.Mode = s.Mode()
	s.keyUser(set, req)
	if _, d.banned = s.addrBan(req, now); d.banned {
		s.metrics.reportsSpared.WithLabelValues(sparedBanned).Inc()
		return false
	}
	if set.ExemptRequest(req) {
		s.metrics.reportsSpared.WithLabelValues(sparedExempt).Inc()
		return false
	}
	_, d.userBanned = s.userBan(req, now)
	d.Applied = set.MatchReportHold(req, status, hold, now, d.Applied)
	switch {
	case req.UserID == "":
	case d.userBanned:
		d.Applied = withoutUserRules(d.Applied)
		s.metrics.reportsSpared.WithLabelValues(sparedUserBanned).Inc()
	case set.ExemptUser(req):
		d.Applied = withoutUserRules(d.Applied)
		s.metrics.reportsSpared.WithLabelValues(sparedUserExempt).Inc()
	}
	return len(d.Applied) > 0
}

// The reasons of rate_limit_reports_spared_total: why a report spent less
// than the rules it matches.
const (
	sparedBanned     = "banned"      // its client IP: nothing
	sparedExempt     = "exempt"      // its address or endpoint: nothing
	sparedUserBanned = "user_banned" // its account (locked): the rules not keyed by user_id
	sparedUserExempt = "user_exempt" // its account, by tier or id: the same
)

// withoutUserRules removes from applied, in place, the rules keyed by
// user_id.
func withoutUserRules(applied []rules.Applied) []rules.Applied {
	kept := applied[:0]
	for _, a := range applied {
		if !a.Rule.KeyedByUser() {
			kept = append(kept, a)
		}
	}
	clear(applied[len(kept):]) // drop references to the removed rules' keys
	return kept
}

// completeReport answers a debited d, gives it its event id and publishes
// its outcome event.
func (s *Service) completeReport(req *rules.Request, status int, hold string, d *Decision, start time.Time) {
	// A report is never refused: a rule whose failure policy is deny has
	// nothing to deny here, it just was not debited.
	d.Unavailable = false
	d.Allowed, d.Reason = true, event.ReasonOK
	if status == ReleaseOnly {
		return
	}
	d.EventID = s.cfg.NewEventID()
	if s.cfg.Outcomes != nil {
		o := event.Outcome{EventID: d.EventID, TS: start, Instance: s.cfg.Instance, UserID: req.UserID, IP: req.IP,
			Endpoint: req.Endpoint, Method: req.Method, Tier: req.Tier, Status: status, Cost: req.Cost, Banned: d.banned,
			UserBanned: d.userBanned, Hold: hold}
		buf := append(make([]byte, 0, len(o.IP)+eventSize), o.IP...)
		key := buf[:len(o.IP):len(o.IP)]
		s.cfg.Outcomes.Publish(key, o.AppendJSON(buf[len(o.IP):]))
	}
	s.metrics.reports.WithLabelValues(statusClass(status)).Inc()
}

// statusClass returns the class of an HTTP status, "1xx" to "5xx": a
// bounded metric label.
func statusClass(status int) string {
	return [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[min(max(status/100, 1), 5)-1]
}
