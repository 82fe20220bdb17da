package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// DescriptorMatch makes a rule a descriptor rule: it applies to the
// descriptors of Envoy's rate limit API (ShouldRateLimit, POST /json), never
// to /v1/check or /v1/auth. It is one leaf of envoyproxy/ratelimit's
// descriptor tree: the domain and the entries from the top level down.
type DescriptorMatch struct {
	Domain string `yaml:"domain" json:"domain"`
	// Entries is the path: a request descriptor matches when it has exactly
	// these keys in this order and every value matches (see DescriptorEntry).
	Entries []DescriptorEntry `yaml:"entries" json:"entries"`
	// Name is envoyproxy/ratelimit's rate_limit name, which the Replaces of
	// other rules refer to.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Replaces names the rules this one replaces: when both match one
	// request, the replaced ones are neither decided nor counted.
	Replaces []string `yaml:"replaces,omitempty" json:"replaces,omitempty"`
	// Unlimited descriptors are answered OK without Redis.
	Unlimited bool `yaml:"unlimited,omitempty" json:"unlimited,omitzero"`
	// Release says which stream-done calls release a hold of a concurrency
	// rule (see ReleaseKey): ReleaseHoldID (the default) only those naming
	// a hold the limiter answered; ReleaseOldest any, the oldest hold of
	// the key when the call names none.
	Release HoldRelease `yaml:"release,omitempty" json:"release,omitempty"`
}

// HoldRelease is how a concurrency descriptor rule's holds are released.
type HoldRelease string

// The values of DescriptorMatch.Release.
const (
	ReleaseHoldID HoldRelease = "hold_id"
	ReleaseOldest HoldRelease = "oldest"
)

// ReleaseKey is the key of the entry that makes a descriptor the release
// of a concurrency rule's hold: Envoy's stream-done call sends the
// request-time descriptor with this entry appended, its value the hold id
// the request-time answer gave (dynamic metadata), so that only a request
// that was admitted releases, and only its own hold.
const ReleaseKey = "hold"

// DescriptorEntry is one level of a descriptor path. An empty Value matches
// any value, each value counting on its own; a Value with '*' is a
// wildcard, each '*' matching any run of characters (see wildcard); any
// other Value matches itself only. At one level an exact value is preferred
// to a wildcard (the one with the most literal characters first, then the
// fewest stars, then in the order of the value's text) and a wildcard to a
// key alone.
type DescriptorEntry struct {
	Key   string `yaml:"key" json:"key"`
	Value string `yaml:"value,omitempty" json:"value,omitempty"`
	// ShareThreshold makes every value matching a wildcard Value count as
	// one: the key holds the pattern, not the value.
	ShareThreshold bool `yaml:"share_threshold,omitempty" json:"share_threshold,omitzero"`
	// DetailedMetric and ValueToMetric put the request's value of this
	// level into the descriptor metric label (bounded; see the API docs).
	DetailedMetric bool `yaml:"detailed_metric,omitempty" json:"detailed_metric,omitzero"`
	ValueToMetric  bool `yaml:"value_to_metric,omitempty" json:"value_to_metric,omitzero"`
}

// Bounds of descriptors, in rules and in requests.
const (
	MaxDomain          = 255
	MaxDescriptorKey   = 256
	MaxDescriptorValue = 1024
	MaxEntries         = maxKeyDims
	MaxDescriptorName  = 128 // a rate limit's name, and each name it replaces
	MaxReplaces        = 16  // names a rate limit replaces
)

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Descriptor is one descriptor of a rate limit request.
type Descriptor struct {
	Entries []Entry
	// Cost is the hits this descriptor adds (its hits_addend, else the
	// request's, else 1); 0 checks without counting.
	Cost int64
	// Limit, when set, is the descriptor's own limit (see overrides).
	Limit *DescriptorLimit
}

// DescriptorRequest is one Envoy rate limit request, checked by the caller
// against the bounds of event. IP and Addr are the client's address (the
// value of the address entry) when it has one; Endpoint and Method are what
// events report.
type DescriptorRequest struct {
	Domain      string
	Descriptors []Descriptor
	// AddressKey is the key of the entries holding a client address
	// (RLS_ADDRESS_KEY): in limit keys their values are grouped as the ip
	// dimension groups clients (see Rule.descriptorCall). Empty: none.
	AddressKey       string
	IP               string
	Addr             netip.Addr
	Endpoint, Method string
}

// descNode is one level of a domain's descriptor tree.
type descNode struct {
	exact map[Entry]*descNode      // key and value
	wild  map[string]*wildChildren // key and wildcard, by key
	any   map[string]*descNode     // key only
	rule  *Rule
	// overrides, on a domain's root, decide its descriptors that carry
	// their own limit.
	overrides *overrides
}

// wildChildren are the children of one key whose values are wildcards:
// nodes[i] is the child of the index's value i. The index is built once
// every rule is in the tree (see index).
type wildChildren struct {
	byValue map[string]*descNode // while the tree is built
	index   *Wildcards
	nodes   []*descNode
}

// child returns e's node below n, creating it.
func (n *descNode) child(e DescriptorEntry) *descNode {
	switch {
	case e.Value == "":
		if n.any == nil {
			n.any = map[string]*descNode{}
		}
		return getOrCreate(n.any, e.Key)
	case e.IsWildcard():
		if n.wild == nil {
			n.wild = map[string]*wildChildren{}
		}
		w := n.wild[e.Key]
		if w == nil {
			w = &wildChildren{byValue: map[string]*descNode{}}
			n.wild[e.Key] = w
		}
		return getOrCreate(w.byValue, e.Value)
	}
	if n.exact == nil {
		n.exact = map[Entry]*descNode{}
	}
	return getOrCreate(n.exact, Entry{e.Key, e.Value})
}

// index builds the wildcard indexes of n and of the nodes below it, once
// the tree holds every rule.
func (n *descNode) index() {
	for _, w := range n.wild {
		values := make([]string, 0, len(w.byValue))
		w.nodes = make([]*descNode, 0, len(w.byValue))
		for v, c := range w.byValue {
			values, w.nodes = append(values, v), append(w.nodes, c)
		}
		w.index, w.byValue = NewWildcards(values), nil
		for _, c := range w.nodes {
			c.index()
		}
	}
	for _, c := range n.exact {
		c.index()
	}
	for _, c := range n.any {
		c.index()
	}
}

func getOrCreate[K comparable](m map[K]*descNode, k K) *descNode {
	c := m[k]
	if c == nil {
		c = &descNode{}
		m[k] = c
	}
	return c
}

// lookup returns the most specific node below n for e, or nil.
func (n *descNode) lookup(e Entry) *descNode {
	if c := n.exact[e]; c != nil {
		return c
	}
	if w := n.wild[e.Key]; w != nil {
		if i, ok := w.index.Match(e.Value); ok {
			return w.nodes[i]
		}
	}
	return n.any[e.Key]
}

// indexDescriptors builds the descriptor trees of rs, by domain, and
// refuses two rules on one path.
func indexDescriptors(rs []*Rule) (map[string]*descNode, error) {
	trees := map[string]*descNode{}
	for _, r := range rs {
		d := r.Descriptor
		if d == nil {
			continue
		}
		n := getOrCreate(trees, d.Domain)
		for _, e := range d.Entries {
			n = n.child(e)
		}
		if n.rule != nil {
			return nil, &FieldError{RuleID: r.ID, Field: "descriptor", Reason: fmt.Sprintf(
				"domain %q, %s: duplicate descriptor (also rule %s)", d.Domain, DescriptorPath(d.Entries), n.rule.ID)}
		}
		n.rule = r
	}
	for _, root := range trees {
		root.index()
	}
	return trees, nil
}

// DescriptorPath names a descriptor path as envoyproxy/ratelimit does:
// key_value per level (the key alone without a value), joined by '.'.
func DescriptorPath(entries []DescriptorEntry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// HasDomain reports whether any descriptor rule is in domain.
func (s *Set) HasDomain(domain string) bool { return s.descriptors[domain] != nil }

// MatchDescriptors appends to out one Applied per descriptor of req that
// a rule matches (Applied.Descriptor is its index), in descriptor order,
// and returns the extended slice. A descriptor matches the rule at the end
// of its path when the tree has one for every entry, level by level, the
// most specific first; rules replaced by another matched rule are left
// out. Unlimited rules are included (their Call has no limits): the caller
// answers them without Redis.
func (s *Set) MatchDescriptors(req *DescriptorRequest, now time.Time, out []Applied) []Applied {
	root := s.descriptors[req.Domain]
	if root == nil {
		return out
	}
	start := len(out)
	replaced := false
	for i := range req.Descriptors {
		desc := &req.Descriptors[i]
		if a, ok := root.release(desc, i, req.AddressKey, now); ok {
			out = append(out, a)
			continue
		}
		n := root
		for _, e := range desc.Entries {
			if n = n.lookup(e); n == nil {
				break
			}
		}
		var r *Rule
		if n != nil {
			r = n.rule
		}
		if desc.Limit != nil { // never replaced, replaces nothing
			rule, call := root.overrides.overrideCall(r, desc, req.AddressKey, now)
			out = append(out, Applied{Rule: rule, Descriptor: i, Call: call})
			continue
		}
		if r == nil {
			continue
		}
		replaced = replaced || len(r.Descriptor.Replaces) > 0
		a := Applied{Rule: r, Descriptor: i, Call: r.descriptorCall(desc, req.AddressKey, now)}
		if r.Reserves() {
			r.reserving(&a)
		}
		out = append(out, a)
	}
	if replaced {
		out = dropReplaced(out, start)
	}
	return out
}

// dropReplaced removes from out[start:] the rules named by the Replaces of
// another rule there. A release or a settle is never replaced and replaces
// nothing: it only ends a hold or a reservation its request took.
func dropReplaced(out []Applied, start int) []Applied {
	var names []string
	for _, a := range out[start:] {
		if !a.Call.Release && !a.Call.Settle {
			names = append(names, a.Rule.Descriptor.Replaces...)
		}
	}
	kept := out[:start]
	for _, a := range out[start:] {
		if n := a.Rule.Descriptor.Name; a.Call.Release || a.Call.Settle || n == "" || !slices.Contains(names, n) { // an override has no name
			kept = append(kept, a)
		}
	}
	return kept
}

// release returns the Applied of desc when it is the release of a
// concurrency rule's hold, or the settle of a reserving rule's reservation
// (see settle): its last entry has the key ReleaseKey and the entries
// before it match a concurrency rule (or a rule that reserves). The call releases, on the
// key the request-time descriptor (those entries) took its hold on, the
// hold the last entry's value names; a value that is no hold id releases
// the key's oldest hold when the rule's Release is ReleaseOldest, and
// nothing otherwise (Applied.NoRelease: the caller answers it without
// Redis). A descriptor whose entries before ReleaseKey match no
// concurrency rule is matched whole, as any other.
func (root *descNode) release(desc *Descriptor, i int, addrKey string, now time.Time) (Applied, bool) {
	n := len(desc.Entries)
	if n < 2 || desc.Entries[n-1].Key != ReleaseKey {
		return Applied{}, false
	}
	node := root
	for _, e := range desc.Entries[:n-1] {
		if node = node.lookup(e); node == nil {
			return Applied{}, false
		}
	}
	r := node.rule
	if r != nil && r.Reserves() {
		return r.settle(desc, i, addrKey, now), true
	}
	if r == nil || r.Algorithm != decide.Concurrency || r.Descriptor.Unlimited {
		return Applied{}, false
	}
	taken := Descriptor{Entries: desc.Entries[:n-1]}
	a := Applied{Rule: r, Descriptor: i, Call: r.descriptorCall(&taken, addrKey, now)}
	a.Call.Cost, a.Call.Release = 0, true
	switch id := desc.Entries[n-1].Value; {
	case decide.ValidHoldID(id):
		a.Call.HoldID = id
	case r.Descriptor.Release == ReleaseOldest: // HoldID "": the oldest
	default:
		a.NoRelease = true
	}
	return a, true
}

// descriptorCall is the call of descriptor rule r for desc, whose entries
// matched r's path: the subject is the entries' keys and values, a shared
// wildcard level counting under its pattern and an address level (key
// addrKey) under the address's group, as the ip dimension counts a client:
// an IPv6 address as its /ipv6_prefix (default 64), so that rotating
// addresses within one prefix earns no new budget; an IPv4 address, an
// IPv4-mapped one included, as itself. A value that is no address counts
// as it is.
func (r *Rule) descriptorCall(desc *Descriptor, addrKey string, now time.Time) decide.Call {
	c := r.c
	if r.Descriptor.Unlimited {
		return decide.Call{Algorithm: r.Algorithm, Cost: desc.Cost}
	}
	var nbuf, vbuf [MaxEntries]string
	names, vals := nbuf[:len(desc.Entries)], vbuf[:len(desc.Entries)]
	for i, e := range desc.Entries {
		names[i], vals[i] = e.Key, e.Value
		switch {
		case r.Descriptor.Entries[i].ShareThreshold:
			vals[i] = r.Descriptor.Entries[i].Value
		case e.Key == addrKey:
			vals[i] = IPSubjectOf(e.Value, c.ipv6Bits)
		}
	}
	limits, penalty := c.limitsAt("", now)
	call := decide.Call{
		Keys:        buildKeys(c.head, c.suffix, names, vals),
		Algorithm:   r.Algorithm,
		Limits:      limits,
		Cost:        desc.Cost,
		Penalty:     penalty,
		Escalations: c.escalations.at(now),
		DebitDenied: r.DebitsDenied(),
		Leased:      r.Leased(),
	}
	if r.Algorithm == decide.Concurrency {
		// A hold whatever the hits_addend; 0 only asks whether one would fit.
		// The caller names the hold (Call.HoldID).
		call.Cost, call.DebitDenied = min(desc.Cost, 1), false
	}
	return call
}

// Blocks reports whether the rule admits nothing: a descriptor rule whose
// limit is 0 requests (envoyproxy/ratelimit's requests_per_unit: 0). Its
// calls are answered without Redis.
func (r *Rule) Blocks() bool { return r.c != nil && r.c.blocks }

func validateDescriptor(r *Rule, p problems) {
	d := r.Descriptor
	if len(r.Match.Endpoints)+len(r.Match.Methods)+len(r.Match.Tiers) > 0 {
		p.add("match", "not allowed with descriptor (descriptor rules apply to Envoy rate limit descriptors only)")
	}
	if len(r.Key) > 0 {
		p.add("key", "not allowed with descriptor (the subject is the descriptor's entries)")
	}
	if len(r.Tiers) > 0 {
		p.add("tiers", "not allowed with descriptor (rate limit requests carry no tier)")
	}
	dp := p.at("descriptor")
	checkText(dp, "domain", d.Domain, MaxDomain, true)
	switch {
	case len(d.Entries) == 0:
		dp.add("entries", "required (1 to %d levels)", MaxEntries)
	case len(d.Entries) > MaxEntries:
		dp.add("entries", "at most %d levels", MaxEntries)
	}
	for i, e := range d.Entries {
		ep := dp.at(fmt.Sprintf("entries[%d]", i))
		checkText(ep, "key", e.Key, MaxDescriptorKey, true)
		checkText(ep, "value", e.Value, MaxDescriptorValue, false)
		if e.ShareThreshold && !e.IsWildcard() {
			ep.add("share_threshold", "needs a wildcard value (with *)")
		}
	}
	checkText(dp, "name", d.Name, MaxDescriptorName, false)
	if len(d.Replaces) > MaxReplaces {
		dp.add("replaces", "at most %d names", MaxReplaces)
	}
	for i, n := range d.Replaces {
		switch {
		case n == "":
			dp.add(fmt.Sprintf("replaces[%d]", i), "must name a rate limit (empty name)")
		case n == d.Name:
			dp.add(fmt.Sprintf("replaces[%d]", i), "%q is this rule's own name", truncate(n, 80))
		default:
			checkText(dp, fmt.Sprintf("replaces[%d]", i), n, MaxDescriptorName, true)
		}
	}
	switch d.Release {
	case "", ReleaseHoldID, ReleaseOldest:
	default:
		dp.add("release", "unknown %q (want %s or %s)", truncate(string(d.Release), 40), ReleaseHoldID, ReleaseOldest)
	}
	if d.Release != "" && r.Algorithm != decide.Concurrency {
		dp.add("release", "only with algorithm concurrency (how the stream-done call releases a hold)")
	}
	if d.Unlimited {
		if len(r.Limits) > 0 || len(r.Schedule) > 0 || r.Penalty != 0 || len(r.Escalate) > 0 {
			dp.add("unlimited", "not allowed with limits, schedule, penalty or escalate")
		}
	}
}

// checkText checks a descriptor string: at most max bytes of printable
// UTF-8 without control characters, non-empty when required.
func checkText(p problems, field, s string, max int, required bool) {
	switch {
	case s == "" && required:
		p.add(field, "required")
	case len(s) > max:
		p.add(field, "at most %d bytes", max)
	case strings.ContainsFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f || c == 0xFFFD }):
		p.add(field, "must be valid UTF-8 without control characters")
	}
}

// blockingLimit reports whether ls is a single limit of 0 requests: the
// only form a zero quota takes (validateLimits refuses it elsewhere).
func blockingLimit(ls []Limit) bool {
	return len(ls) == 1 && ls[0].Requests == 0 && ls[0].Rate == 0 && ls[0].Concurrent == 0
}
