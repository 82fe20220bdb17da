package rules

import (
	"fmt"
	"time"
)

// Bounds of a concurrency limit.
const (
	maxConcurrent = 1_000_000
	minHold       = time.Second
	maxHold       = 24 * time.Hour
)

// validateConcurrencyLimits checks the limits of a concurrency rule (its
// own, a tier's or a schedule entry's): exactly one, written
// {concurrent: N, hold: D}, without the fields of the rate algorithms.
func validateConcurrencyLimits(p problems, field string, ls []Limit) {
	if len(ls) != 1 {
		p.add(field, "a concurrency rule has exactly one limit ({concurrent: N, hold: D})")
		if len(ls) == 0 {
			return
		}
	}
	for i, l := range ls {
		lp := p.at(fmt.Sprintf("%s[%d]", field, i))
		if l.Concurrent < 1 || l.Concurrent > maxConcurrent {
			lp.add("concurrent", "must be between 1 and %d (the requests of a key in flight at once)", maxConcurrent)
		}
		switch h := l.Hold.Std(); {
		case h == 0: // the default
		case h < minHold || h > maxHold:
			lp.add("hold", "must be between %s and %s (how long a hold nobody reports lasts; default %s)",
				Duration(minHold), Duration(maxHold), Duration(DefaultHold))
		case h%time.Millisecond != 0:
			lp.add("hold", "must be a whole number of milliseconds")
		}
		for _, f := range []struct {
			name string
			set  bool
		}{{"requests", l.Requests != 0}, {"rate", l.Rate != 0}, {"burst", l.Burst != 0}, {"per", l.Per != 0}} {
			if f.set {
				lp.add(f.name, "not allowed with algorithm concurrency (use concurrent and hold)")
			}
		}
	}
}

// validateConcurrencyRule refuses what a concurrency rule cannot do. Its
// limit counts requests in flight, not a rate over time: there is nothing
// for a penalty or an escalation to add to a key that is full, nothing a
// report spends but a release, and no budget to lease: a hold must be in
// Redis so that whichever limiter the report reaches can release it.
func validateConcurrencyRule(r *Rule, p problems) {
	why := map[string]string{
		"penalty":  "a concurrency rule denies while its key is full and admits as soon as a hold ends",
		"escalate": "a concurrency rule denies while its key is full and admits as soon as a hold ends",
		"lease":    "a hold must be in Redis so that whichever limiter the report reaches can release it",
		"debit":    "a concurrency rule takes a hold only when one fits",
		"spent_by": "a concurrency rule's holds are taken by checks and released by reports naming them",
		"statuses": "a report releases the hold it names whatever its status",
	}
	set := map[string]bool{
		"penalty":  r.Penalty != 0,
		"escalate": len(r.Escalate) > 0,
		"lease":    r.Leased(),
		"debit":    r.Debit != "",
		"spent_by": r.SpentBy != "",
		"statuses": len(r.Statuses) > 0,
	}
	for _, f := range []string{"penalty", "escalate", "lease", "debit", "spent_by", "statuses"} {
		if set[f] {
			p.add(f, "not allowed with algorithm concurrency: %s", why[f])
		}
	}
	for i, e := range r.Schedule {
		if e.Penalty != nil && *e.Penalty != 0 {
			p.add(fmt.Sprintf("schedule[%d].penalty", i), "not allowed with algorithm concurrency: %s", why["penalty"])
		}
	}
}
