package rules

import (
	"reflect"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Carry tells what a limiter may keep of a rule set prev that s replaces:
// the returned function maps the state key of a call of prev and the
// limits it was decided under to the limits of s a call of that key is
// decided under now, and reports true, when the call's rule is in both sets
// under the same keys and decides alike (algorithm, key, penalty,
// escalations, debit rule, what spends it, lease, IPv6 grouping, schedule,
// descriptor), and s still has those limits among the rule's (its own, a
// tier's or a schedule entry's, compared by value). The state kept for such
// a call (a lease, a cached denial) then means under s what it meant under
// prev. It reports false for any other key: a rule changed or removed, or
// limits no longer in force.
func (s *Set) Carry(prev *Set) func(stateKey string, limits []decide.Limit) ([]decide.Limit, bool) {
	alike := make(map[string]*Rule) // by key head, the rules of s that decide as in prev
	for _, old := range prev.rules {
		if r := s.byID[old.ID]; r != nil && r.c.head == old.c.head && decidesAlike(old, r) {
			alike[r.c.head] = r
		}
	}
	return func(stateKey string, limits []decide.Limit) ([]decide.Limit, bool) {
		r := alike[keyHead(stateKey)]
		if r == nil {
			return nil, false
		}
		return r.c.compiledLimits(limits)
	}
}

// keyHead returns the head of a rule's key, "<prefix>{<rule id>|" (see the
// key layout in keys.go): the prefix has no '{' and rule ids no '|'.
func keyHead(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	bar := strings.IndexByte(key[open:], '|')
	if bar < 0 {
		return ""
	}
	return key[:open+bar+1]
}

// decidesAlike reports whether a and b, rules of one id, decide a call of
// the same key and limits alike and keep the same state for it.
func decidesAlike(a, b *Rule) bool {
	return a.Algorithm == b.Algorithm && slices.Equal(a.Key, b.Key) && a.Penalty == b.Penalty &&
		slices.Equal(a.Escalate, b.Escalate) && a.DebitsDenied() == b.DebitsDenied() && a.SpentBy == b.SpentBy &&
		a.Leased() == b.Leased() && (!a.Leased() || a.Lease.MaxUnits == b.Lease.MaxUnits) &&
		a.IPv6Prefix == b.IPv6Prefix && reflect.DeepEqual(a.Schedule, b.Schedule) &&
		sameDescriptor(a.Descriptor, b.Descriptor)
}

// sameDescriptor reports whether two descriptor matches build the same
// keys and answer alike: domain, the entries' keys, values and sharing.
func sameDescriptor(a, b *DescriptorMatch) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Domain == b.Domain && a.Unlimited == b.Unlimited &&
		slices.EqualFunc(a.Entries, b.Entries, func(x, y DescriptorEntry) bool {
			return x.Key == y.Key && x.Value == y.Value && x.ShareThreshold == y.ShareThreshold
		})
}

// compiledLimits returns the compiled limits of the rule equal to limits.
func (c *compiled) compiledLimits(limits []decide.Limit) ([]decide.Limit, bool) {
	if l, ok := c.limits.equal(limits); ok {
		return l, true
	}
	for i := range c.schedule {
		if l, ok := c.schedule[i].limits.equal(limits); ok {
			return l, true
		}
	}
	return nil, false
}

// equal returns the list of ls equal to limits.
func (ls *limitSet) equal(limits []decide.Limit) ([]decide.Limit, bool) {
	if slices.Equal(ls.def, limits) {
		return ls.def, true
	}
	for _, t := range ls.tiers {
		if slices.Equal(t.limits, limits) {
			return t.limits, true
		}
	}
	return nil, false
}
