package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/archivequery"
	"github.com/ratewarden/ratewarden/internal/event"
)

// timed observes how long a page took.
func (s *Server) timed(page string) func() {
	start := time.Now()
	return func() { s.metrics.pages.WithLabelValues(page).Observe(time.Since(start).Seconds()) }
}

// unavailable logs err and returns what the page says instead: the cause
// stays in the log, which may name internal addresses.
func (s *Server) unavailable(what string, err error) string {
	s.cfg.Log.Warn("console: "+what+" unavailable", zap.Error(err))
	if errors.Is(err, archivequery.ErrBusy) {
		return what + " is busy with other pages: reload in a moment."
	}
	return what + " did not answer; see the console's log."
}

type overviewPage struct {
	ActiveBans                 int
	LiveError                  bool
	BansHour, BansDay, Denials barChart
	Instances                  []adminclient.Instance
	InSync                     int
	RulesVersion               string
	Mode                       string
	// Lag is the detector's by source, LagStatus where Prometheus's
	// figures stand (promOff, promUnavailable, promOK).
	Lag       []sourceLag
	LagStatus string
	Errors    []string
}

// overview serves / and answers 404 for any path no other route serves.
func (s *Server) overview(w http.ResponseWriter, r *http.Request, ss session) {
	if r.URL.Path != "/" {
		s.render(w, r, http.StatusNotFound, "error", ss, errorPage{Title: "Not found", Message: "No such page."})
		return
	}
	defer s.timed("overview")()
	var p overviewPage
	o, err := s.cfg.Archive.Overview(r.Context(), s.now())
	if err != nil {
		p.Errors = append(p.Errors, s.unavailable("the archive", err))
	}
	p.BansHour, p.BansDay, p.Denials = newBarChart(o.BansHour), newBarChart(o.BansDay), newBarChart(o.DenialsByRule)
	p.ActiveBans = int(o.ActiveBans)
	if live, err := s.cfg.Admin.Bans(r.Context()); err == nil {
		p.ActiveBans = len(live)
	} else {
		p.LiveError = true
		p.Errors = append(p.Errors, s.unavailable("the limiters' admin API", err))
	}
	p.Mode, _ = s.cfg.Admin.Mode(r.Context())
	p.Lag, p.LagStatus = s.detectorLag(r.Context())
	if rules, err := s.cfg.Admin.Rules(r.Context()); err == nil {
		p.Instances, p.RulesVersion = rules.Instances, rules.Version
		for _, in := range rules.Instances {
			if in.InSync {
				p.InSync++
			}
		}
	}
	s.render(w, r, http.StatusOK, "overview", ss, p)
}

// banFilter narrows the bans in force; an empty field matches all.
type banFilter struct {
	Scope    string // ip or user
	Scenario string // the ban's reason: scan, violations_1h, manual...
	Subject  string // a part of the subject, in any case
}

type bansPage struct {
	Filter    banFilter
	Bans      []event.Ban
	Truncated bool
	Error     string
}

// maxListed bounds the bans a page lists.
const maxListed = 500

func (s *Server) bans(w http.ResponseWriter, r *http.Request, ss session) {
	defer s.timed("bans")()
	q := r.URL.Query()
	p := bansPage{Filter: banFilter{Scope: q.Get("scope"), Scenario: strings.TrimSpace(q.Get("scenario")),
		Subject: strings.TrimSpace(q.Get("subject"))}}
	live, err := s.cfg.Admin.Bans(r.Context())
	if err != nil {
		p.Error = s.unavailable("the limiters' admin API", err)
	}
	for _, b := range live {
		if matches(b, p.Filter) {
			p.Bans = append(p.Bans, b)
		}
	}
	slices.SortFunc(p.Bans, func(a, b event.Ban) int { return cmp.Or(b.TS.Compare(a.TS), cmp.Compare(a.Key(), b.Key())) })
	if len(p.Bans) > maxListed {
		p.Bans, p.Truncated = p.Bans[:maxListed], true
	}
	s.render(w, r, http.StatusOK, "bans", ss, p)
}

func matches(b event.Ban, f banFilter) bool {
	return (f.Scope == "" || b.Scope == f.Scope) && (f.Scenario == "" || b.Reason == f.Scenario) &&
		(f.Subject == "" || strings.Contains(strings.ToLower(b.Subject), strings.ToLower(f.Subject)))
}

type subjectPage struct {
	Scope, Value, Range string
	Shown               bool
	From, To            time.Time
	Live                *event.Ban
	Chart               *timelineChart
	Bans                []archivequery.Ban
	Error               string
}

func (s *Server) subject(w http.ResponseWriter, r *http.Request, ss session) {
	defer s.timed("subject")()
	q := r.URL.Query()
	p := subjectPage{Scope: cmp.Or(q.Get("scope"), "ip"), Value: q.Get("value"), Range: q.Get("range")}
	span, err := time.ParseDuration(p.Range)
	if err != nil || !slices.Contains(timelineRanges, p.Range) {
		p.Range, span = "24h", 24*time.Hour
	}
	if p.Value == "" {
		s.render(w, r, http.StatusOK, "subject", ss, p)
		return
	}
	subj, err := archivequery.ParseSubject(p.Scope, p.Value)
	if err != nil {
		p.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, "subject", ss, p)
		return
	}
	p.Value, p.Shown = subj.Value, true
	p.To = s.now().UTC().Truncate(time.Second)
	p.From = p.To.Add(-span)
	p.Live = s.liveBan(r.Context(), subj)
	t, err := s.cfg.Archive.Timeline(r.Context(), subj, p.From, p.To)
	if err == nil {
		p.Bans, err = s.cfg.Archive.BansOf(r.Context(), subj, p.From, p.To)
	}
	if err != nil {
		p.Error = s.unavailable("the archive", err)
	} else {
		chart := newTimelineChart(t, p.Bans)
		p.Chart = &chart
	}
	s.render(w, r, http.StatusOK, "subject", ss, p)
}

// liveBan returns the ban in force on subj, if the limiters know one.
func (s *Server) liveBan(ctx context.Context, subj archivequery.Subject) *event.Ban {
	live, err := s.cfg.Admin.Bans(ctx)
	if err != nil {
		return nil
	}
	for _, b := range live {
		if b.Scope == subj.Scope && (b.Subject == subj.Value || subj.Scope == event.ScopeUser && strings.EqualFold(b.Subject, subj.Value)) {
			return &b
		}
	}
	return nil
}

type rulesPage struct {
	Rules  adminclient.Rules
	Rows   []ruleRow
	Window string
	Error  string
	// Counts is where the hits and denials of Prometheus stand (promOff,
	// promUnavailable, promOK).
	Counts string
	// Edit is the dynamic rule form as submitted, when the admin API
	// refused it: shown again with the fields at fault.
	Edit *ruleForm
}

// ruleForm is a dynamic rule being written, and what the admin API said of
// it.
type ruleForm struct {
	ID, Body string
	Message  string
	Fields   []adminclient.FieldError
}

type ruleRow struct {
	adminclient.Rule
	// Denials are the refusals the archive holds; Hits and Denied the
	// requests and refusals Prometheus counted (with Counts promOK).
	Denials    int64
	Hits       int64
	Denied     int64
	Definition string
}

// rulesWindow is the span the rules page counts denials over.
const rulesWindow = 24 * time.Hour

func (s *Server) rules(w http.ResponseWriter, r *http.Request, ss session) {
	defer s.timed("rules")()
	s.renderRules(w, r, ss, http.StatusOK, nil)
}

// renderRules renders the rules page, with a refused form if any.
func (s *Server) renderRules(w http.ResponseWriter, r *http.Request, ss session, status int, edit *ruleForm) {
	p := rulesPage{Window: "24h", Edit: edit}
	rules, err := s.cfg.Admin.Rules(r.Context())
	if err != nil {
		p.Error = s.unavailable("the limiters' admin API", err)
	}
	p.Rules = rules
	now := s.now()
	ids := make([]string, len(rules.Rules))
	for i, rule := range rules.Rules {
		ids[i] = rule.ID
	}
	denials, err := s.cfg.Archive.RuleDenials(r.Context(), now.Add(-rulesWindow), now, ids)
	if err != nil {
		p.Error = s.unavailable("the archive", err)
	}
	hits, denied, counts := s.ruleCounts(r.Context())
	p.Counts = counts
	for _, rule := range rules.Rules {
		var def bytes.Buffer
		if json.Indent(&def, rule.Rule, "", "  ") != nil {
			def.Reset()
			def.Write(rule.Rule)
		}
		p.Rows = append(p.Rows, ruleRow{Rule: rule, Denials: denials[rule.ID],
			Hits: count(hits[rule.ID]), Denied: count(denied[rule.ID]), Definition: def.String()})
	}
	s.render(w, r, status, "rules", ss, p)
}

type auditPage struct {
	Entries []archivequery.AuditEntry
	Older   string
	Error   string
}

// auditPageSize is the entries a page of the audit trail shows.
const auditPageSize = 100

func (s *Server) audit(w http.ResponseWriter, r *http.Request, ss session) {
	defer s.timed("audit")()
	before := s.now().Add(time.Minute) // the clocks of the limiters may be a little ahead
	if t, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get("before")); err == nil {
		before = t
	}
	var p auditPage
	entries, err := s.cfg.Archive.Audit(r.Context(), before, auditPageSize)
	if err != nil {
		p.Error = s.unavailable("the archive", err)
	}
	p.Entries = entries
	if len(entries) == auditPageSize {
		p.Older = entries[len(entries)-1].At.UTC().Format(time.RFC3339Nano)
	}
	s.render(w, r, http.StatusOK, "audit", ss, p)
}
