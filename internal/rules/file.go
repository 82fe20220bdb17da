package rules

import (
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// Validate reports every problem of f as a FieldError, joined: each rule as
// Rule.Validate does, ids unique, exemptions and detection settings. A rule
// without a usable id is named by its index ("rules[3].key").
func (f *File) Validate() error {
	p := newProblems()
	seen := make(map[string]int, len(f.Rules))
	for i := range f.Rules {
		r := &f.Rules[i]
		rp := p
		if validID(r.ID) {
			rp.ruleID = r.ID
			if j, dup := seen[r.ID]; dup {
				rp.add("id", "duplicate (also rules[%d])", j)
			} else {
				seen[r.ID] = i
			}
		} else {
			rp = p.at(fmt.Sprintf("rules[%d]", i))
		}
		validateRule(r, rp)
	}
	validateExempt(f.Exempt, p.at("exempt"))
	validateDetection(f.Detection, p.at("detection"))
	return p.err()
}

func validateExempt(e Exempt, p problems) {
	for i, t := range e.Tiers {
		if err := checkTier(t); err != "" {
			p.add(fmt.Sprintf("tiers[%d]", i), "%s", err)
		}
	}
	for i, s := range e.IPs {
		if _, err := ipprefix.Parse(s); err != nil {
			p.add(fmt.Sprintf("ips[%d]", i), "%q is not an IP address or CIDR", truncate(s, 80))
		}
	}
	for i, s := range e.Endpoints {
		if _, err := compilePattern(s); err != nil {
			p.add(fmt.Sprintf("endpoints[%d]", i), "%q: %v", truncate(s, 80), err)
		}
	}
	for i, u := range e.Users {
		if u == "" {
			p.add(fmt.Sprintf("users[%d]", i), "must not be empty")
		}
	}
}

func validateDetection(d Detection, p problems) {
	if w := d.Warn; w != nil {
		wp := p.at("warn")
		if w.Violations < 1 {
			wp.add("violations", "must be at least 1")
		}
		positive(wp, "within", w.Within)
	}
	if len(d.Ban) > maxEscalations {
		p.add("ban", "at most %d entries", maxEscalations)
	}
	for i, b := range d.Ban {
		bp := p.at(fmt.Sprintf("ban[%d]", i))
		if b.Violations < 1 {
			bp.add("violations", "must be at least 1")
		}
		positive(bp, "within", b.Within)
		positive(bp, "duration", b.Duration)
	}
	if s := d.Scan; s != nil {
		sp := p.at("scan")
		if s.DistinctEndpoints < 1 {
			sp.add("distinct_endpoints", "must be at least 1")
		}
		positive(sp, "within", s.Within)
		positive(sp, "duration", s.Duration)
	}
	// Zero means the default for the settings below (WithDefaults), so only
	// values that can never be right are refused.
	optionalPositive(p, "grace", d.Grace)
	ep := p.at("escalation")
	if d.Escalation.Factor < 0 {
		ep.add("factor", "must be at least 1")
	}
	optionalPositive(ep, "cap", d.Escalation.Cap)
	optionalPositive(ep, "period", d.Escalation.Period)
	if d.Samples < 0 || d.Samples > maxSamples {
		p.add("samples", "must be between 1 and %d", maxSamples)
	}
	validateIPv6Prefix(p, "ipv6_prefix", d.IPv6Prefix)
	// Events up to this far ahead move the detector's time, so a large
	// value lets one limiter's fast clock hide the others' events again.
	if s := d.MaxClockSkew; s != 0 && (s.Std() < time.Millisecond || s.Std() > maxClockSkew) {
		p.add("max_clock_skew", "must be between 1ms and 1h")
	}
	validateOutcomeScenarios(d, p)
}

// optionalPositive accepts zero (the default) or at least 1ms.
func optionalPositive(p problems, field string, d Duration) {
	if d != 0 {
		positive(p, field, d)
	}
}

func positive(p problems, field string, d Duration) {
	if d.Std() < time.Millisecond {
		p.add(field, "must be at least 1ms")
	}
}
