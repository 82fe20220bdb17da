package main

import (
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// describeExempt lists what is exempt (see rules.Exempt).
func describeExempt(e rules.Exempt) string {
	var parts []string
	for _, l := range []struct {
		name string
		list []string
	}{{"tiers", e.Tiers}, {"ips", e.IPs}, {"endpoints", e.Endpoints}, {"users", e.Users}} {
		if len(l.list) > 0 {
			parts = append(parts, l.name+" "+strings.Join(l.list, ", "))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// describeDetection summarizes the abuse detector's warn, ban and scan
// policies. d has its defaults filled in, so the sections are never nil;
// the nil checks only keep a hand-built value from crashing the check.
func describeDetection(d rules.Detection) string {
	var parts []string
	if w := d.Warn; w != nil {
		parts = append(parts, fmt.Sprintf("warn after %d %s in %s", w.Violations, plural(w.Violations, "violation", "violations"), reportDuration(w.Within.Std())))
	}
	if len(d.Ban) == 0 {
		parts = append(parts, "no violation bans")
	}
	for _, p := range d.Ban {
		parts = append(parts, fmt.Sprintf("ban %s after %d %s in %s", reportDuration(p.Duration.Std()), p.Violations,
			plural(p.Violations, "violation", "violations"), reportDuration(p.Within.Std())))
	}
	if s := d.Scan; s != nil {
		parts = append(parts, fmt.Sprintf("scan ban %s after %d distinct %s in %s", reportDuration(s.Duration.Std()), s.DistinctEndpoints,
			plural(s.DistinctEndpoints, "endpoint", "endpoints"), reportDuration(s.Within.Std())))
	}
	parts = append(parts, describeOutcomeScenarios(d)...)
	parts = append(parts, "IPv6 offenders: "+describeIPv6Grouping(d.IPv6Prefix, "are one offender, banned together"))
	if d.DryRun {
		parts = append(parts, "dry run (bans are published, not enforced)")
	}
	return strings.Join(parts, "; ")
}

// describeOutcomeScenarios describes the enabled scenarios of detection
// from outcomes.
func describeOutcomeScenarios(d rules.Detection) []string {
	var parts []string
	scenario := func(s *rules.OutcomeScenario, what string, n int64, counted string, def []int) {
		if !s.On() {
			return
		}
		statuses := s.Statuses
		if len(statuses) == 0 {
			statuses = def
		}
		text := fmt.Sprintf("%s ban %s after more than %d %s in %s (failures: status %s", what, reportDuration(s.Duration.Std()), n,
			counted, reportDuration(s.Within.Std()), joinInts(statuses))
		if len(s.Endpoints) > 0 {
			text += " on " + strings.Join(s.Endpoints, ", ")
		}
		if s.DryRun {
			text += "; dry run"
		}
		parts = append(parts, text+")")
	}
	if p := d.CredentialStuffing; p != nil {
		scenario(&p.OutcomeScenario, "credential stuffing", p.DistinctUsers, "users failing from one source", rules.DefaultAuthFailureStatuses)
	}
	if p := d.BruteForce; p != nil {
		scenario(&p.OutcomeScenario, "brute force", p.Failures, "failures from one source", rules.DefaultAuthFailureStatuses)
	}
	if p := d.AccountAttack; p != nil {
		v4, v6 := p.Networks(d.IPv6Prefix)
		owner := "2xx"
		if p.SuccessStatuses != nil {
			owner = "status " + joinInts(p.SuccessStatuses)
		}
		scenario(&p.OutcomeScenario, "account attack", p.DistinctSources,
			fmt.Sprintf("networks (IPv4 /%d, IPv6 /%d) failing on one account (each source banned but those that got a %s on it)", v4, v6, owner),
			rules.DefaultAuthFailureStatuses)
		if p.On() && p.LockAccount > 0 {
			parts = append(parts, "an attacked account is locked for "+reportDuration(p.LockAccount.Std()))
		}
	}
	if p := d.Probing; p != nil {
		scenario(&p.OutcomeScenario, "probing", p.DistinctEndpoints, "distinct endpoints failing for one source", rules.DefaultProbingStatuses)
	}
	return parts
}
