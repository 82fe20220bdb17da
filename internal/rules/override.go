package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// DescriptorLimit is a request descriptor's own limit (Envoy's
// RateLimitDescriptor.limit): Requests per Per, in place of the rules'.
type DescriptorLimit struct {
	Requests int64
	Per      time.Duration
}

// overrides are the rules a domain's descriptors with their own limit are
// decided by, as envoyproxy/ratelimit applies such a limit: in place of
// the rule the descriptor matches, or alone when it matches none (the
// domain must have rules); a fixed window that counts every call, with no
// name, replaces, shadow mode, penalty or escalation. Its counter is the
// matched rule's own when that rule is a fixed window of the same window
// (envoyproxy/ratelimit keys the counter by the descriptor, not by the
// limit), else the domain's. A leased rule's count is not shared: its
// units are held by limiters, and its hash is not the counter an override
// counts in.
type overrides struct {
	counting, blocking *Rule // blocking: a limit of 0 requests
}

// overrideIDPrefix starts the ids of the override rules: "override." and
// the domain in the characters of rule ids (a hash ends a long one).
const overrideIDPrefix = "override."

func newOverrides(domain, keyPrefix string) *overrides {
	var b strings.Builder
	for _, c := range domain {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	id := overrideIDPrefix + b.String()
	if len(id) > 64 {
		sum := sha256.Sum256([]byte(domain))
		id = id[:47] + "." + hex.EncodeToString(sum[:8])
	}
	rule := func(requests int64) *Rule {
		r := &Rule{ID: id, Priority: defaultPriority, Algorithm: decide.FixedWindow, OnRedisFailure: FailLocal,
			Limits:     []Limit{{Requests: requests, Per: Duration(time.Second)}},
			Descriptor: &DescriptorMatch{Domain: domain}}
		r.c = compileRule(r, keyPrefix)
		return r
	}
	return &overrides{counting: rule(1), blocking: rule(0)}
}

// overrideCall is the call of desc, whose Limit is set, in place of
// matched (nil: none): the rule it is decided by and its call.
func (o *overrides) overrideCall(matched *Rule, desc *Descriptor, addrKey string, now time.Time) (*Rule, decide.Call) {
	r := o.counting
	if desc.Limit.Requests == 0 {
		r = o.blocking
	}
	var keys decide.Keys
	if matched != nil && !matched.Descriptor.Unlimited && matched.Algorithm == decide.FixedWindow && !matched.Leased() && !matched.Reserves() {
		keys = matched.descriptorCall(desc, addrKey, now).Keys
	} else {
		var nbuf, vbuf [MaxEntries]string
		names, vals := nbuf[:len(desc.Entries)], vbuf[:len(desc.Entries)]
		for i, e := range desc.Entries {
			names[i], vals[i] = e.Key, e.Value
			if e.Key == addrKey {
				vals[i] = IPSubjectOf(e.Value, r.c.ipv6Bits)
			}
		}
		keys = buildKeys(r.c.head, r.c.suffix, names, vals)
	}
	return r, decide.Call{
		Keys:        keys,
		Algorithm:   decide.FixedWindow,
		Limits:      []decide.Limit{{Requests: desc.Limit.Requests, Per: desc.Limit.Per}},
		Cost:        desc.Cost,
		DebitDenied: true,
	}
}
