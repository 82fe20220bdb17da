// The report of "limiter rules check": what a valid rules file defines, in
// the words of the rules file. It is text for the people who write the
// file, so it lives with the command; it only reads the compiled rules.

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// reportLabelWidth aligns the values of a rule's description; longer labels are
// followed by a single space.
const reportLabelWidth = 10

// reportContIndent starts the continuation lines of a value (tier overrides,
// further schedule entries) under the value column.
var reportContIndent = strings.Repeat(" ", 2+reportLabelWidth+1)

// writeRulesReport describes a valid rules file, at path, as "limiter rules
// check" prints it: the rules in evaluation order (rules.Set.Rules: priority,
// then id), then the exemptions and the detection settings (defaults
// filled in, as the detector applies them). f is the file set compiled
// from (the rules.Set does not keep the exemptions).
func writeRulesReport(b *strings.Builder, path string, f *rules.File, set *rules.Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s\n  SUCCESS: %d %s found\n\n", path, len(rs), plural(int64(len(rs)), "rule", "rules"))
	for _, r := range rs {
		writeRule(b, r, nil)
	}
	fmt.Fprintf(b, "exempt: %s\n", describeExempt(f.Exempt))
	fmt.Fprintf(b, "detection: %s\n", describeDetection(set.Detection()))
}

// writeRule describes one compiled rule as "limiter rules check" prints
// it. domainFiles, when set, names the file of each descriptor domain.
func writeRule(b *strings.Builder, r *rules.Rule, domainFiles map[string]string) {
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
			writeField(b, "spent by:", describeSpentByReports(r))
		}
		if r.Reserves() {
			writeField(b, "reserve:", describeReserve(r))
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
func describeSpentByReports(r *rules.Rule) string {
	which := "every report (POST /v1/report)"
	if len(r.Statuses) > 0 {
		which = "reports (POST /v1/report) of status " + joinInts(r.Statuses)
	}
	if r.Reserves() {
		return which + ", by their cost, fitting or not; a report naming its check's hold settles its reservation instead"
	}
	return which + ", by their cost, fitting or not; checks spend nothing and are refused once no unit is left"
}

// describeReserve says what a check of a rule that reserves takes.
func describeReserve(r *rules.Rule) string {
	return fmt.Sprintf("each check reserves %d units (or its own reserve), admitted only if they fit, until its report settles them; "+
		"one nobody settles lapses after %s, spent", r.Reserve, reportDuration(r.ReserveLifetime()))
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
func describeLease(r *rules.Rule) string {
	if m := r.Lease.MaxUnits; m > 0 {
		return fmt.Sprintf("each limiter holds up to %d %s of a key and answers from memory", m, plural(m, "unit", "units"))
	}
	n := r.LeaseMax(decideLimits(r.Limits))
	return fmt.Sprintf("each limiter holds up to 1/%d of the smallest quota in force, at least 1 (%d %s of the limits above), and answers from memory",
		rules.DefaultLeaseShare, n, plural(n, "unit", "units"))
}

// decideLimits converts limits to the decision model's, as the rules
// compile them.
func decideLimits(ls []rules.Limit) []decide.Limit {
	out := make([]decide.Limit, len(ls))
	for i, l := range ls {
		out[i] = l.Decide()
	}
	return out
}

// describeDebit says which calls spend the rule's budget.
func describeDebit(r *rules.Rule) string {
	if r.DebitsDenied() {
		return "always: every call's cost counts, denied or not; usage may pass the limit, and calls are denied while it does"
	}
	return "admitted: only admitted calls count; usage never passes the limit"
}

// writeField writes one "label: value" line of a rule's description.
func writeField(b *strings.Builder, label, value string) {
	fmt.Fprintf(b, "  %-*s %s\n", reportLabelWidth, label, value)
}

// writeTierLimits writes the per-tier overrides of a limit list, one line
// each, in tier order so that the output does not depend on map order.
func writeTierLimits(b *strings.Builder, indent string, alg decide.Algorithm, tiers map[string][]rules.Limit) {
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
func describeMatch(m rules.Match) string {
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
// that has no value for one of its dimensions (rules.Set.Match), which
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
		bits = rules.DefaultIPv6Prefix
	}
	if bits == 128 {
		return "every address on its own (no grouping)"
	}
	return fmt.Sprintf("the addresses of one /%d %s", bits, what)
}

// describeLimits renders a limit list in the terms of its algorithm:
// requests per window, or tokens per interval with a burst.
func describeLimits(alg decide.Algorithm, ls []rules.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		per := reportDuration(l.Per.Std())
		if alg == decide.Concurrency {
			d := l.Decide()
			parts[i] = fmt.Sprintf("%d in flight at once, a hold nobody releases lapsing after %s", d.Requests, reportDuration(d.Per))
			continue
		}
		if alg == decide.TokenBucket {
			parts[i] = fmt.Sprintf("%d %s per %s, burst %d", l.Rate, plural(l.Rate, "token", "tokens"), per, l.Burst)
		} else {
			parts[i] = fmt.Sprintf("%d per %s", l.Requests, per)
		}
	}
	return strings.Join(parts, "; ")
}

// describeSchedule renders a schedule entry: when it is active, then its
// limits and penalty. Tier overrides are written separately.
func describeSchedule(alg decide.Algorithm, e rules.ScheduleEntry) string {
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
func describeEscalation(e rules.Escalation) string {
	s := fmt.Sprintf("after %d %s within %s, denied for %s", e.Triggers, plural(e.Triggers, "denial", "denials"),
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

// reportDuration renders d as the rules file writes it ("5m" rather than
// "5m0s", see rules.Duration), for every duration of the report so they
// all read alike.
func reportDuration(d time.Duration) string { return rules.Duration(d).String() }

// reportTime renders a schedule or escalation bound in RFC 3339, in the
// offset it was written with.
func reportTime(t time.Time) string { return t.Format(time.RFC3339Nano) }

// plural returns one when n is 1, else many: the words of the reports.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
