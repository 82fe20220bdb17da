package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

// Lease makes a rule's budget leased: a limiter takes part of a hot key's
// budget from Redis at once (decide.Call.Leased, decide.Lease) and admits
// requests from it in memory, without a round trip each. Every unit is
// debited in Redis before a limiter admits anything with it, so the limit
// holds across limiters; what a limiter holds and does not spend before
// its lease ends is what the window loses (see docs/leases.md).
//
// In the rules file it is written "lease: true" (the defaults), "lease:
// false" (off, as when left out) or a mapping:
//
//	lease:
//	  max_units: 500
//
// and in JSON alike: true, false or {"max_units": 500}.
type Lease struct {
	// MaxUnits is the most units one limiter holds of a key at a time;
	// 0: the default (see Rule.LeaseMax). At least 1 when set, and at most
	// the smallest quota of the rule's limits.
	MaxUnits int64 `yaml:"max_units,omitempty" json:"max_units,omitempty"`

	// off: decoded from false. Rule decoding (Parse, ParseRuleJSON) and
	// Compile drop such a Lease; Enabled reports it off meanwhile.
	off bool
}

// DefaultLeaseShare divides the smallest quota of a leased rule's limits
// into the default most a limiter holds of a key (Rule.LeaseMax). Units a
// limiter holds when its lease ends unspent are lost to the window; with
// three limiters each holding q/64 at the end of a window, what the window
// can strand is 3×q/64, under 5% of its quota.
const DefaultLeaseShare = 64

// Enabled reports whether l leases: set, and not written false.
func (l *Lease) Enabled() bool { return l != nil && !l.off }

// Leased reports whether the rule's budget is leased (Lease set and not
// false): every call it produces has decide.Call.Leased.
func (r *Rule) Leased() bool { return r.Lease.Enabled() }

// LeaseMax is the most units one limiter may hold of a key of the rule at
// a time, when the limits in force for the call are limits (Applied.Call
// .Limits: the base limits, a tier's or a schedule entry's): Lease.MaxUnits
// when set, else max(1, q/DefaultLeaseShare), q the smallest quota of
// limits (decide.Limit.Quota: requests, or burst for a token bucket). The
// default scales with the limits in force, so a tier or a schedule entry of
// a smaller quota strands no more of its window than the base limits do of
// theirs. 0 for a rule that does not lease.
func (r *Rule) LeaseMax(limits []decide.Limit) int64 {
	if !r.Leased() {
		return 0
	}
	if r.Lease.MaxUnits > 0 {
		return r.Lease.MaxUnits
	}
	var q int64
	for i, l := range limits {
		if i == 0 || l.Quota() < q {
			q = l.Quota()
		}
	}
	return max(1, q/DefaultLeaseShare)
}

// dropOffLease sets r.Lease to nil when it was written false, so that a
// rule that does not lease has no Lease, whichever way it was written.
func (r *Rule) dropOffLease() {
	if r.Lease != nil && !r.Lease.Enabled() {
		r.Lease = nil
	}
}

// leaseMapping is the mapping form of a lease as decoded: a pointer tells
// max_units: 0 from max_units left out.
type leaseMapping struct {
	MaxUnits *int64 `yaml:"max_units" json:"max_units"`
}

// leaseKeys are the keys of a lease written as a mapping.
var leaseKeys = yamlkeys.Keys(reflect.TypeFor[leaseMapping]())

const (
	leaseForms       = "true, false or a mapping such as {max_units: 500}"
	leaseMaxUnitsSet = "must be at least 1 (leave max_units out for the default)"
)

// UnmarshalYAML accepts true, false or a mapping of max_units, and
// refuses any other key, as the decoder refuses unknown fields. Its errors
// are type errors, so that the decoder goes on and reports every problem.
func (l *Lease) UnmarshalYAML(n *yaml.Node) error {
	fail := func(line int, format string, args ...any) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", line) + fmt.Sprintf(format, args...)}}
	}
	switch n.Kind {
	case yaml.ScalarNode:
		var on bool
		if n.ShortTag() != "!!bool" || n.Decode(&on) != nil {
			return fail(n.Line, "lease must be %s", leaseForms)
		}
		*l = Lease{off: !on}
		return nil
	case yaml.MappingNode:
		lease := Lease{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value != "max_units" {
				return &yaml.TypeError{Errors: []string{yamlkeys.Unknown{Line: k.Line, In: "lease", Key: k.Value, Valid: leaseKeys}.String()}}
			}
			if v.ShortTag() != "!!int" || v.Decode(&lease.MaxUnits) != nil {
				return fail(v.Line, "lease.max_units: want an integer")
			}
			if lease.MaxUnits == 0 {
				return fail(v.Line, "lease.max_units: %s", leaseMaxUnitsSet)
			}
		}
		*l = lease
		return nil
	}
	return fail(n.Line, "lease must be %s", leaseForms)
}

// MarshalYAML writes true for the defaults, false for a lease written
// false, else the mapping.
func (l Lease) MarshalYAML() (any, error) {
	switch {
	case l.off:
		return false, nil
	case l.MaxUnits == 0:
		return true, nil
	}
	return leaseMapping{MaxUnits: &l.MaxUnits}, nil
}

// UnmarshalJSON accepts true, false or an object of max_units; unknown
// fields are refused, as everywhere in a rule.
func (l *Lease) UnmarshalJSON(b []byte) error {
	switch s := string(bytes.TrimSpace(b)); {
	case s == "true" || s == "false":
		*l = Lease{off: s == "false"}
		return nil
	case !strings.HasPrefix(s, "{"):
		return &json.UnmarshalTypeError{Value: truncate(s, 32), Type: reflect.TypeFor[Lease]()}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // not passed on by encoding/json to an Unmarshaler
	var m leaseMapping
	if err := dec.Decode(&m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return te // encoding/json prefixes its field with "lease."
		}
		return &FieldError{Field: "lease", Reason: strings.TrimPrefix(err.Error(), "json: ")}
	}
	if m.MaxUnits != nil && *m.MaxUnits == 0 {
		return &FieldError{Field: "lease.max_units", Reason: leaseMaxUnitsSet}
	}
	*l = Lease{}
	if m.MaxUnits != nil {
		l.MaxUnits = *m.MaxUnits
	}
	return nil
}

// MarshalJSON writes true for the defaults, false for a lease written
// false, else the object.
func (l Lease) MarshalJSON() ([]byte, error) {
	switch {
	case l.off:
		return []byte("false"), nil
	case l.MaxUnits == 0:
		return []byte("true"), nil
	}
	return json.Marshal(leaseMapping{MaxUnits: &l.MaxUnits})
}

// validateLease checks a leased rule. Leasing needs an algorithm whose
// state does not depend on when within its window a debited unit is spent,
// and nothing that must reach every limiter at once or that debits calls
// one by one; max_units, when set, is at most the smallest quota.
func validateLease(r *Rule, p problems, algOK bool) {
	if !r.Leased() || (algOK && r.Algorithm == decide.Concurrency) { // validateConcurrencyRule refuses it
		return
	}
	switch {
	case r.Descriptor != nil && r.Descriptor.Unlimited:
		p.add("lease", "not with unlimited: an unlimited rate limit is answered without Redis, there is no budget to lease")
		return
	case r.Descriptor != nil && blockingLimit(r.Limits):
		p.add("lease", "not with 0 requests: such a rate limit denies without Redis, there is no budget to lease")
		return
	}
	if algOK && r.Algorithm == decide.SlidingWindow {
		p.add("lease", "not with algorithm sliding_window: the sliding window log records the time of each request; "+
			"a leased unit is spent at another time than it was debited, so the log would no longer be exact per request "+
			"— use sliding_window_counter")
	}
	var held []string
	if r.Penalty != 0 {
		held = append(held, "penalty")
	}
	for i, e := range r.Schedule {
		if e.Penalty != nil && *e.Penalty != 0 {
			held = append(held, fmt.Sprintf("schedule[%d].penalty", i))
		}
	}
	if len(r.Escalate) > 0 {
		held = append(held, "escalate")
	}
	if len(held) > 0 {
		p.add("lease", "not with %s: a penalty must stop every instance at once, while other instances keep serving "+
			"the units they hold", strings.Join(held, ", "))
	}
	if r.SpentBy == SpentByReport {
		p.add("lease", "not with spent_by: report: its checks only ask whether a unit is left and reports debit "+
			"denied calls one by one, fitting or not; there are no units to hold ahead")
	}
	if m := r.Lease.MaxUnits; m < 0 {
		p.add("lease.max_units", "must be at least 1")
	} else if q, ok := smallestQuota(r, algOK); m > 0 && ok && m > q {
		p.add("lease.max_units", "%d is more than %d, the smallest quota of the rule's limits "+
			"(requests, or burst for token_bucket; tiers and schedule entries included)", m, q)
	}
}

// smallestQuota returns the smallest quota (requests, or burst for the
// token bucket) of every limit of r, tiers and schedule entries included,
// and false when there is no valid one to bound by.
func smallestQuota(r *Rule, algOK bool) (int64, bool) {
	if !algOK {
		return 0, false
	}
	lists := [][]Limit{r.Limits}
	for _, t := range r.Tiers {
		lists = append(lists, t)
	}
	for _, e := range r.Schedule {
		lists = append(lists, e.Limits)
		for _, t := range e.Tiers {
			lists = append(lists, t)
		}
	}
	var quotas []int64
	for _, ls := range lists {
		for _, l := range ls {
			q := l.Requests
			if r.Algorithm == decide.TokenBucket {
				q = l.Burst
			}
			quotas = append(quotas, q)
		}
	}
	if len(quotas) == 0 {
		return 0, false
	}
	q := slices.Min(quotas)
	return q, q >= 1
}
