package rules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// reportLabelWidth aligns the values of a rule's description; longer labels are
// followed by a single space.
const reportLabelWidth = 10

// reportContIndent starts the continuation lines of a value (tier overrides,
// further schedule entries) under the value column.
var reportContIndent = strings.Repeat(" ", 2+reportLabelWidth+1)

// WriteReport describes a valid rules file, at path, as "limiter rules
// check" prints it: the rules in evaluation order (Set.Rules: priority,
// then id), then the exemptions and the detection settings (defaults
// filled in, as the detector applies them). f is the file set compiled
// from (the Set does not keep the exemptions).
func WriteReport(b *strings.Builder, path string, f *File, set *Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s\n  SUCCESS: %d %s found\n\n", path, len(rs), Plural(int64(len(rs)), "rule", "rules"))
	for _, r := range rs {
		WriteRule(b, r, nil)
	}
	fmt.Fprintf(b, "exempt: %s\n", describeExempt(f.Exempt))
	fmt.Fprintf(b, "detection: %s\n", describeDetection(set.Detection()))
}

// WriteRule describes one compiled rule as "limiter rules check" prints
// it. domainFiles, when set, names the file of each descriptor domain.
func WriteRule(b *strings.Builder, r *Rule, domainFiles map[string]string) {
	mode := ""
	if r.Shadow {
		mode = ", shadow"
	}
	fmt.Fprintf(b, "%s (priority %d, %s%s)\n", r.ID, r.Priority, r.Algorithm, mode)
	if r.Shadow {
		writeField(b, "shadow:", "reports only, never denies")
	}
	if d := r.Descriptor; d != nil {
		writeDescriptor(b, r, domainFiles[d.Domain])
	} else {
		writeField(b, "matches:", describeMatch(r.Match))
		writeField(b, "key:", describeKey(r.Key))
		if slices.Contains(r.Key, "ip") {
			writeField(b, "ipv6:", describeIPv6Grouping(r.IPv6Prefix, "share the limits"))
		}
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits))
		if r.SpentByReports() {
			writeField(b, "spent by:", describeSpentByReports(r.Statuses))
		}
	}
	writeTierLimits(b, reportContIndent, r.Algorithm, r.Tiers)
	if r.Penalty != 0 {
		writeField(b, "penalty:", reportDuration(r.Penalty.Std()))
	}
	if len(r.Schedule) > 0 {
		writeField(b, "schedule:", "while an entry is active (the first one wins), its limits and tier overrides replace the rule's")
		for _, e := range r.Schedule {
			b.WriteString(reportContIndent + describeSchedule(r.Algorithm, e) + "\n")
			writeTierLimits(b, reportContIndent+"  ", r.Algorithm, e.Tiers)
		}
	}
	for i, e := range r.Escalate {
		label := ""
		if i == 0 {
			label = "escalate:"
		}
		writeField(b, label, describeEscalation(e))
	}
	if d := r.Descriptor; d == nil || !d.Unlimited && !r.Blocks() { // else answered without Redis
		if r.Leased() {
			writeField(b, "lease:", describeLease(r))
		}
		if r.Debit != "" { // else the kind's default, which the docs state
			writeField(b, "debit:", describeDebit(r))
		}
		writeField(b, "on Redis failure:", string(r.OnRedisFailure))
	}
}

// describeSpentByReports says which reports spend a rule spent by reports.
func describeSpentByReports(statuses []int) string {
	which := "every report (POST /v1/report)"
	if len(statuses) > 0 {
		which = "reports (POST /v1/report) of status " + joinInts(statuses)
	}
	return which + ", by their cost, fitting or not; checks spend nothing and are refused once no unit is left"
}

func joinInts(list []int) string {
	s := make([]string, len(list))
	for i, n := range list {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// describeLease says how much of a key's budget one limiter holds of a
// leased rule: max_units, or the default computed for the base limits
// (tier and schedule limits have their own).
func describeLease(r *Rule) string {
	if m := r.Lease.MaxUnits; m > 0 {
		return fmt.Sprintf("each limiter holds up to %d %s of a key and answers from memory", m, Plural(m, "unit", "units"))
	}
	n := r.LeaseMax(decideLimits(r.Limits))
	return fmt.Sprintf("each limiter holds up to 1/%d of the smallest quota in force, at least 1 (%d %s of the limits above), and answers from memory",
		DefaultLeaseShare, n, Plural(n, "unit", "units"))
}

// describeDebit says which calls spend the rule's budget.
func describeDebit(r *Rule) string {
	if r.DebitsDenied() {
		return "always: every call's cost counts, denied or not; usage may pass the limit, and calls are denied while it does"
	}
	return "admitted: only admitted calls count; usage never passes the limit"
}

// writeDescriptor describes what a descriptor rule matches (the domain,
// from file when known, and the path) and its limits, which an unlimited
// rule and a rule of 0 requests answer without Redis.
func writeDescriptor(b *strings.Builder, r *Rule, file string) {
	d := r.Descriptor
	domain := d.Domain
	if file != "" {
		domain += " (" + file + ")"
	}
	writeField(b, "domain:", domain)
	writeField(b, "path:", DescriptorPath(d.Entries))
	if d.Name != "" {
		writeField(b, "name:", d.Name)
	}
	if len(d.Replaces) > 0 {
		writeField(b, "replaces:", strings.Join(d.Replaces, ", ")+" (not applied when this rule matches too)")
	}
	var flags []string
	for _, e := range d.Entries {
		if e.ShareThreshold {
			flags = append(flags, fmt.Sprintf("share_threshold on %s (the values matching %s count as one)", e.Key, e.Value))
		}
		if e.DetailedMetric {
			flags = append(flags, "detailed_metric on "+e.Key)
		}
		if e.ValueToMetric {
			flags = append(flags, "value_to_metric on "+e.Key)
		}
	}
	if len(flags) > 0 {
		writeField(b, "flags:", strings.Join(flags, "; "))
	}
	switch {
	case d.Unlimited:
		writeField(b, "limits:", "unlimited (answered OK without Redis)")
	case r.Blocks():
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits)+" (denies every request, without Redis)")
	default:
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits))
	}
}

// writeField writes one "label: value" line of a rule's description.
func writeField(b *strings.Builder, label, value string) {
	fmt.Fprintf(b, "  %-*s %s\n", reportLabelWidth, label, value)
}

// writeTierLimits writes the per-tier overrides of a limit list, one line
// each, in tier order so that the output does not depend on map order.
func writeTierLimits(b *strings.Builder, indent string, alg decide.Algorithm, tiers map[string][]Limit) {
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		fmt.Fprintf(b, "%stier %s: %s\n", indent, t, describeLimits(alg, tiers[t]))
	}
}

// describeMatch says which requests a rule applies to; an empty list
// matches anything.
func describeMatch(m Match) string {
	var s strings.Builder
	if len(m.Methods) == 0 {
		s.WriteString("requests of any method")
	} else {
		// Methods compare case-insensitively; the compiled rule keeps them
		// upper-cased and deduplicated, and so does the description.
		var methods []string
		for _, v := range m.Methods {
			if v = strings.ToUpper(v); !slices.Contains(methods, v) {
				methods = append(methods, v)
			}
		}
		s.WriteString(strings.Join(methods, ", ") + " requests")
	}
	if len(m.Endpoints) == 0 {
		s.WriteString(" to any endpoint")
	} else {
		s.WriteString(" to " + strings.Join(m.Endpoints, ", "))
	}
	switch len(m.Tiers) {
	case 0:
		s.WriteString("; any tier")
	case 1:
		s.WriteString("; tier " + m.Tiers[0])
	default:
		s.WriteString("; tiers " + strings.Join(m.Tiers, ", "))
	}
	return s.String()
}

// describeKey lists the key dimensions. A rule does not apply to a request
// that has no value for one of its dimensions (Set.Match), which
// matters for the dimensions a request may lack: user_id, tier and
// attributes. ip, endpoint and method always have a value (the API requires
// ip and endpoint, and defaults method to GET), so they get no note.
func describeKey(key []string) string {
	var optional []string
	for _, k := range key {
		if k == "user_id" || k == "tier" || strings.HasPrefix(k, "attr:") {
			optional = append(optional, k)
		}
	}
	s := strings.Join(key, ", ")
	if len(optional) > 0 {
		s += fmt.Sprintf(" (requests without %s are not limited by this rule)", strings.Join(optional, " or "))
	}
	return s
}

// describeIPv6Grouping says how IPv6 clients are grouped at prefix length
// bits (0: the default): the addresses of one prefix are one client, whose
// requests do what.
func describeIPv6Grouping(bits int, what string) string {
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if bits == 128 {
		return "every address on its own (no grouping)"
	}
	return fmt.Sprintf("the addresses of one /%d %s", bits, what)
}

// describeLimits renders a limit list in the terms of its algorithm:
// requests per window, or tokens per interval with a burst.
func describeLimits(alg decide.Algorithm, ls []Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		per := reportDuration(l.Per.Std())
		if alg == decide.TokenBucket {
			parts[i] = fmt.Sprintf("%d %s per %s, burst %d", l.Rate, Plural(l.Rate, "token", "tokens"), per, l.Burst)
		} else {
			parts[i] = fmt.Sprintf("%d per %s", l.Requests, per)
		}
	}
	return strings.Join(parts, "; ")
}

// describeSchedule renders a schedule entry: when it is active, then its
// limits and penalty. Tier overrides are written separately.
func describeSchedule(alg decide.Algorithm, e ScheduleEntry) string {
	var when string
	if d := e.Daily; d != nil {
		tz := d.TZ
		if tz == "" {
			tz = "UTC" // the default zone of daily entries
		}
		when = fmt.Sprintf("daily %s-%s %s", d.From, d.To, tz)
	} else {
		when = fmt.Sprintf("from %s to %s", reportTime(e.From.Time), reportTime(e.To.Time))
	}
	s := when + ": " + describeLimits(alg, e.Limits)
	if e.Penalty != nil {
		s += "; penalty " + reportDuration(e.Penalty.Std())
	}
	return s
}

// describeEscalation renders an escalation entry and the period it is
// bounded to, if any.
func describeEscalation(e Escalation) string {
	s := fmt.Sprintf("after %d %s within %s, denied for %s", e.Triggers, Plural(e.Triggers, "denial", "denials"),
		reportDuration(e.Within.Std()), reportDuration(e.Penalty.Std()))
	switch {
	case !e.From.IsZero() && !e.To.IsZero():
		s += fmt.Sprintf(" (from %s to %s)", reportTime(e.From.Time), reportTime(e.To.Time))
	case !e.From.IsZero():
		s += fmt.Sprintf(" (from %s)", reportTime(e.From.Time))
	case !e.To.IsZero():
		s += fmt.Sprintf(" (until %s)", reportTime(e.To.Time))
	}
	return s
}

// describeExempt lists what is exempt (see Exempt).
func describeExempt(e Exempt) string {
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
func describeDetection(d Detection) string {
	var parts []string
	if w := d.Warn; w != nil {
		parts = append(parts, fmt.Sprintf("warn after %d %s in %s", w.Violations, Plural(w.Violations, "violation", "violations"), reportDuration(w.Within.Std())))
	}
	if len(d.Ban) == 0 {
		parts = append(parts, "no violation bans")
	}
	for _, p := range d.Ban {
		parts = append(parts, fmt.Sprintf("ban %s after %d %s in %s", reportDuration(p.Duration.Std()), p.Violations,
			Plural(p.Violations, "violation", "violations"), reportDuration(p.Within.Std())))
	}
	if s := d.Scan; s != nil {
		parts = append(parts, fmt.Sprintf("scan ban %s after %d distinct %s in %s", reportDuration(s.Duration.Std()), s.DistinctEndpoints,
			Plural(s.DistinctEndpoints, "endpoint", "endpoints"), reportDuration(s.Within.Std())))
	}
	parts = append(parts, describeOutcomeScenarios(d)...)
	parts = append(parts, "IPv6 offenders: "+describeIPv6Grouping(d.IPv6Prefix, "are one offender, banned together"))
	if d.DryRun {
		parts = append(parts, "dry run (bans are published, not enforced)")
	}
	return strings.Join(parts, "; ")
}

// reportDuration renders d as the rules file writes it ("5m" rather than
// "5m0s", see formatDuration), for every duration of the report so they
// all read alike.
func reportDuration(d time.Duration) string { return formatDuration(d) }

// reportTime renders a schedule or escalation bound in RFC 3339, in the
// offset it was written with.
func reportTime(t time.Time) string { return t.Format(time.RFC3339Nano) }

// Plural returns one when n is 1, else many: the words of the reports.
func Plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// describeOutcomeScenarios describes the enabled scenarios of detection
// from outcomes.
func describeOutcomeScenarios(d Detection) []string {
	var parts []string
	scenario := func(s *OutcomeScenario, what string, n int64, counted string, def []int) {
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
		scenario(&p.OutcomeScenario, "credential stuffing", p.DistinctUsers, "users failing from one source", DefaultAuthFailureStatuses)
	}
	if p := d.BruteForce; p != nil {
		scenario(&p.OutcomeScenario, "brute force", p.Failures, "failures from one source", DefaultAuthFailureStatuses)
	}
	if p := d.AccountAttack; p != nil {
		v4, v6 := p.Networks(d.IPv6Prefix)
		owner := "2xx"
		if p.SuccessStatuses != nil {
			owner = "status " + joinInts(p.SuccessStatuses)
		}
		scenario(&p.OutcomeScenario, "account attack", p.DistinctSources,
			fmt.Sprintf("networks (IPv4 /%d, IPv6 /%d) failing on one account (each source banned but those that got a %s on it)", v4, v6, owner),
			DefaultAuthFailureStatuses)
		if p.On() && p.LockAccount > 0 {
			parts = append(parts, "an attacked account is locked for "+reportDuration(p.LockAccount.Std()))
		}
	}
	if p := d.Probing; p != nil {
		scenario(&p.OutcomeScenario, "probing", p.DistinctEndpoints, "distinct endpoints failing for one source", DefaultProbingStatuses)
	}
	return parts
}
