package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Bounds of a rule.
const (
	maxLimits      = 8
	maxSchedule    = 32
	maxEscalations = 16
	maxTriggers    = 1000
	maxEndpoints   = 64
	maxQuota       = 1 << 53 // Lua numbers are doubles: integers are exact up to 2^53
)

// algorithmNames lists the algorithms for error messages.
const algorithmNames = "fixed_window, sliding_window, sliding_window_counter, token_bucket or concurrency"

// Validate reports every problem of r as a FieldError, joined. It is the
// validation of the rules file, for one rule (the admin API uses it); it does
// not check that the id is unique in a set (File.Validate and Compile do). A
// zero OnRedisFailure means local.
func (r Rule) Validate() error {
	p := newProblems()
	if validID(r.ID) {
		p.ruleID = r.ID
	}
	validateRule(&r, p)
	return p.err()
}

func validateRule(r *Rule, p problems) {
	switch {
	case r.ID == "":
		p.add("id", "required")
	case !validID(r.ID):
		p.add("id", "%q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", truncate(r.ID, 80))
	}
	if r.Descriptor != nil {
		validateDescriptor(r, p)
	} else {
		validateMatch(r.Match, p.at("match"))
		validateKey(r.Key, p)
	}
	// A descriptor rule's ipv6_prefix groups its address levels, whose key
	// (RLS_ADDRESS_KEY) the rules do not know.
	if validateIPv6Prefix(p, "ipv6_prefix", r.IPv6Prefix) && r.IPv6Prefix != 0 && r.Descriptor == nil && !slices.Contains(r.Key, "ip") {
		p.add("ipv6_prefix", "applies to the ip key dimension only, and key has no ip")
	}
	algOK := true
	switch r.Algorithm {
	case decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket, decide.Concurrency:
	case "":
		p.add("algorithm", "required (%s)", algorithmNames)
		algOK = false
	default:
		p.add("algorithm", "unknown %q (want %s)", truncate(string(r.Algorithm), 40), algorithmNames)
		algOK = false
	}
	switch {
	case r.Descriptor != nil && r.Descriptor.Unlimited: // validateDescriptor refuses limits
	case r.Descriptor != nil && blockingLimit(r.Limits):
		validateBlocking(r, p, algOK)
	default:
		validateLimits(p, "limits", r.Limits, r.Algorithm, algOK)
	}
	validateTierLimits(p, "tiers", r.Tiers, r.Algorithm, algOK)
	validateMillis(p, "penalty", r.Penalty, 0)
	switch r.OnRedisFailure {
	case "", FailLocal, FailAllow, FailDeny:
	default:
		p.add("on_redis_failure", "unknown %q (want local, allow or deny)", truncate(string(r.OnRedisFailure), 40))
	}
	switch r.Debit {
	case "", DebitAdmitted, DebitAlways:
	default:
		p.add("debit", "unknown %q (want admitted or always)", truncate(string(r.Debit), 40))
	}
	validateSpentBy(r, p)
	if len(r.Schedule) > maxSchedule {
		p.add("schedule", "at most %d entries", maxSchedule)
	}
	for i, e := range r.Schedule {
		validateScheduleEntry(e, p.at(fmt.Sprintf("schedule[%d]", i)), r.Algorithm, algOK)
	}
	if len(r.Escalate) > maxEscalations {
		p.add("escalate", "at most %d entries", maxEscalations)
	}
	for i, e := range r.Escalate {
		validateEscalation(e, p.at(fmt.Sprintf("escalate[%d]", i)))
	}
	validateLease(r, p, algOK)
	validateReserve(r, p, algOK)
	if algOK && r.Algorithm == decide.Concurrency {
		validateConcurrencyRule(r, p)
	}
}

func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func validateMatch(m Match, p problems) {
	if len(m.Endpoints) > maxEndpoints {
		p.add("endpoints", "at most %d patterns", maxEndpoints)
	}
	for i, e := range m.Endpoints {
		if _, err := compilePattern(e); err != nil {
			p.add(fmt.Sprintf("endpoints[%d]", i), "%q: %v", truncate(e, 80), err)
		}
	}
	for i, m := range m.Methods {
		if !validMethod(m) {
			p.add(fmt.Sprintf("methods[%d]", i), "%q is not an HTTP method token", truncate(m, 40))
		}
	}
	for i, t := range m.Tiers {
		if err := checkTier(t); err != "" {
			p.add(fmt.Sprintf("tiers[%d]", i), "%s", err)
		}
	}
}

// validMethod accepts an RFC 9110 token of at most 32 bytes.
func validMethod(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// checkTier returns why t is not a valid tier name, or "". Tiers become
// metric label values, so they are short printable ASCII.
func checkTier(t string) string {
	if t == "" || len(t) > 64 {
		return fmt.Sprintf("tier %q must be 1 to 64 bytes", truncate(t, 80))
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Sprintf("tier %q must be printable ASCII without spaces", t)
		}
	}
	return ""
}

func validateKey(key []string, p problems) {
	if len(key) == 0 {
		p.add("key", "required (at least one dimension)")
		return
	}
	if len(key) > maxKeyDims {
		p.add("key", "at most %d dimensions", maxKeyDims)
	}
	for i, k := range key {
		if _, err := parseDimension(k); err != nil {
			p.add(fmt.Sprintf("key[%d]", i), "%q: %v", truncate(k, 80), err)
			continue
		}
		if j := slices.Index(key[:i], k); j >= 0 {
			p.add(fmt.Sprintf("key[%d]", i), "duplicate dimension %q (also key[%d])", k, j)
		}
	}
}

// validateIPv6Prefix checks an IPv6 grouping: 0 (the default) or
// MinIPv6Prefix to 128. It reports whether the value is valid.
func validateIPv6Prefix(p problems, field string, bits int) bool {
	if bits == 0 || (bits >= MinIPv6Prefix && bits <= 128) {
		return true
	}
	p.add(field, "must be between %d and 128 (a shorter prefix would group unrelated networks; 128: no grouping)", MinIPv6Prefix)
	return false
}

// validateLimits checks a list of limits for algorithm alg; kind-specific
// checks are skipped when the algorithm itself is invalid.
func validateLimits(p problems, field string, ls []Limit, alg decide.Algorithm, algOK bool) {
	switch {
	case len(ls) == 0:
		p.add(field, "required (1 to %d limits)", maxLimits)
		return
	case len(ls) > maxLimits:
		p.add(field, "at most %d limits", maxLimits)
	}
	if algOK && alg == decide.Concurrency {
		validateConcurrencyLimits(p, field, ls)
		return
	}
	for i, l := range ls {
		lp := p.at(fmt.Sprintf("%s[%d]", field, i))
		if validateMillis(lp, "per", l.Per, time.Millisecond) {
			for j := range i {
				if ls[j].Per == l.Per {
					lp.add("per", "duplicate per %s (also %s[%d])", l.Per, field, j)
					break
				}
			}
		}
		if !algOK {
			continue
		}
		if l.Concurrent != 0 {
			lp.add("concurrent", "not allowed with algorithm %s (only with concurrency)", alg)
		}
		if l.Hold != 0 {
			lp.add("hold", "not allowed with algorithm %s (only with concurrency)", alg)
		}
		if alg == decide.TokenBucket {
			validateBucket(l, lp, alg)
			continue
		}
		if l.Requests < 1 || l.Requests > maxQuota {
			lp.add("requests", "must be between 1 and 2^53")
		} else if ms := l.Per.Std().Milliseconds(); alg == decide.SlidingWindowCounter && ms > 0 && l.Requests > maxQuota/ms {
			// The script weighs counts by ms in integers up to requests × per.
			lp.add("requests", "requests × per (in ms) must be at most 2^53")
		}
		if l.Rate != 0 {
			lp.add("rate", "not allowed with algorithm %s (use requests)", alg)
		}
		if l.Burst != 0 {
			lp.add("burst", "not allowed with algorithm %s (use requests)", alg)
		}
	}
}

// validateBlocking checks a descriptor rule of 0 requests: a window
// algorithm and nothing that would need a count.
func validateBlocking(r *Rule, p problems, algOK bool) {
	validateMillis(p.at("limits[0]"), "per", r.Limits[0].Per, time.Millisecond)
	if algOK && r.Algorithm == decide.TokenBucket {
		p.add("limits[0]", "0 requests needs a window algorithm (a bucket of 0 is written burst: 0, which is refused)")
	}
	if len(r.Schedule) > 0 || r.Penalty != 0 || len(r.Escalate) > 0 {
		p.add("limits[0].requests", "0 (deny every request) is not allowed with schedule, penalty or escalate")
	}
}

func validateBucket(l Limit, p problems, alg decide.Algorithm) {
	if l.Requests != 0 {
		p.add("requests", "not allowed with algorithm %s (use rate and burst)", alg)
	}
	if l.Rate < 1 || l.Rate > maxQuota {
		p.add("rate", "must be between 1 and 2^53")
	}
	if l.Burst < 1 {
		p.add("burst", "must be at least 1")
		return
	}
	// The bucket is kept in tokens x per (ms) x 1000; it must stay exact.
	if ms := l.Per.Std().Milliseconds(); ms > 0 && l.Burst > maxQuota/(1000*ms) {
		p.add("burst", "burst × 1000 × per (in ms) must be at most 2^53")
	}
}

func validateTierLimits(p problems, field string, tiers map[string][]Limit, alg decide.Algorithm, algOK bool) {
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	slices.Sort(names)
	for i, t := range names {
		if err := checkTier(t); err != "" {
			p.add(field, "%s", err)
			continue
		}
		if j := slices.IndexFunc(names[:i], func(u string) bool { return strings.EqualFold(u, t) }); j >= 0 {
			p.add(field+"."+t, "duplicate tier (also %s; tiers compare case-insensitively)", names[j])
		}
		validateLimits(p, field+"."+t, tiers[t], alg, algOK)
	}
}

// validateMillis checks that d is at least min and a whole number of
// milliseconds, and reports whether it is.
func validateMillis(p problems, field string, d Duration, min time.Duration) bool {
	switch {
	case d.Std() < min && min > 0:
		p.add(field, "must be at least %s", min)
	case d < 0:
		p.add(field, "must not be negative")
	case d.Std()%time.Millisecond != 0:
		p.add(field, "must be a whole number of milliseconds")
	default:
		return true
	}
	return false
}

// maxStatuses bounds the statuses of a rule spent by reports.
const maxStatuses = 64

// validateSpentBy checks spent_by and statuses. A rule spent by reports is
// a request rule whose checks are probes: it debits every report (debit
// admitted would contradict it) and has no penalty or escalations (a probe
// writes nothing; a spent budget already refuses until the window frees
// it).
func validateSpentBy(r *Rule, p problems) {
	switch r.SpentBy {
	case "", SpentByCheck:
		if len(r.Statuses) > 0 {
			p.add("statuses", "only with spent_by: report")
		}
		return
	case SpentByReport:
	default:
		p.add("spent_by", "unknown %q (want check or report)", truncate(string(r.SpentBy), 40))
		return
	}
	switch {
	case r.Descriptor != nil:
		p.add("spent_by", "report is for request rules; a descriptor rule's cost after the response comes with its hits_addend")
	case r.Debit == DebitAdmitted:
		p.add("debit", "admitted contradicts spent_by: report (a report's cost is known after the response and always debited)")
	case r.Penalty != 0 || len(r.Escalate) > 0 || slices.ContainsFunc(r.Schedule, func(e ScheduleEntry) bool { return e.Penalty != nil && *e.Penalty != 0 }):
		p.add("spent_by", "report does not take penalty or escalate: a spent budget refuses checks until the window frees it")
	}
	if len(r.Statuses) > maxStatuses {
		p.add("statuses", "at most %d", maxStatuses)
	}
	for i, s := range r.Statuses {
		if s < 100 || s > 599 {
			p.add(fmt.Sprintf("statuses[%d]", i), "%d is not an HTTP status (100 to 599)", s)
		}
	}
}
