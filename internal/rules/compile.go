package rules

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
	"github.com/ratewarden/ratewarden/internal/userid"
)

// Options configure Compile.
type Options struct {
	// KeyPrefix starts every Redis key; default "rw:". It must not contain
	// '{' or '}' (the rule's hash tag must be the key's first).
	KeyPrefix string
	// CaseSensitiveUserIDs keys user ids exactly as sent; by default they
	// are folded (userid.Fold), so that every spelling of one account is
	// one key (see Set.UserKey).
	CaseSensitiveUserIDs bool
}

// defaultKeyPrefix is the key prefix when Options.KeyPrefix is empty.
const defaultKeyPrefix = "rw:"

// Set is a compiled, immutable rule set, safe for concurrent use.
type Set struct {
	rules        []*Rule
	requestRules []*Rule              // the rules of /v1/check and /v1/auth: rules without descriptor
	reportRules  []*Rule              // the request rules spent by reports (/v1/report)
	holdRules    []*Rule              // the request rules of algorithm concurrency (holds released by reports)
	descriptors  map[string]*descNode // descriptor rules by domain
	byID         map[string]*Rule
	exempt       compiledExempt
	exactUsers   bool // Options.CaseSensitiveUserIDs
	detection    Detection
	tiers        []string
	attrs        []string
}

type compiledExempt struct {
	tiers     []string
	prefixes  []netip.Prefix
	endpoints []endpointPattern
	users     map[string]struct{}
}

// compiled is the per-request form of a rule.
type compiled struct {
	endpoints   []endpointPattern // empty: any endpoint
	methods     []string          // upper-case; empty: any
	tiers       []string          // upper-case; empty: any
	dims        []dimension
	names       []string // the dimensions' names, as keys spell them
	ipv6Bits    int      // grouping of IPv6 clients for the ip dimension, 1..128
	head        string   // "<prefix>{<rule id>|"
	suffix      string   // state key suffix
	limits      limitSet
	penalty     time.Duration
	schedule    []window
	escalations escalationTimeline
	blocks      bool // a descriptor rule of 0 requests (see Rule.Blocks)
	userKey     func(string) string
}

// limitSet is a list of limits with per-tier overrides, converted once.
type limitSet struct {
	def   []decide.Limit
	tiers []tierLimits
}

type tierLimits struct {
	tier   string // upper-case
	limits []decide.Limit
}

func compileLimitSet(def []Limit, tiers map[string][]Limit) limitSet {
	ls := limitSet{def: decideLimits(def)}
	for t, l := range tiers {
		ls.tiers = append(ls.tiers, tierLimits{tier: strings.ToUpper(t), limits: decideLimits(l)})
	}
	slices.SortFunc(ls.tiers, func(a, b tierLimits) int { return cmp.Compare(a.tier, b.tier) })
	return ls
}

func decideLimits(ls []Limit) []decide.Limit {
	out := make([]decide.Limit, len(ls))
	for i, l := range ls {
		out[i] = l.Decide()
	}
	return out
}

// forTier returns the limits of tier (case-insensitive), or the default.
func (ls *limitSet) forTier(tier string) []decide.Limit {
	if tier != "" {
		for i := range ls.tiers {
			if strings.EqualFold(ls.tiers[i].tier, tier) {
				return ls.tiers[i].limits
			}
		}
	}
	return ls.def
}

// Compile validates f and compiles it. Rules are ordered by priority, then
// id. The Set keeps its own copies of the rules; f may be reused.
func Compile(f *File, opts Options) (*Set, error) {
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = defaultKeyPrefix
	}
	if err := validatePrefix(opts.KeyPrefix); err != nil {
		return nil, fmt.Errorf("key prefix %q: %w", opts.KeyPrefix, err)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Set{
		byID:       make(map[string]*Rule, len(f.Rules)),
		detection:  f.Detection.WithDefaults(),
		exactUsers: opts.CaseSensitiveUserIDs,
	}
	s.exempt = compileExempt(f.Exempt, s.UserKey)
	tiers := map[string]bool{}
	attrs := map[string]bool{}
	for _, t := range f.Exempt.Tiers {
		tiers[strings.ToUpper(t)] = true
	}
	for i := range f.Rules {
		r := f.Rules[i] // copy: the Set owns its rules
		r.dropOffLease()
		if r.Lease != nil {
			l := *r.Lease
			r.Lease = &l
		}
		r.c = compileRule(&r, opts.KeyPrefix)
		r.c.userKey = s.UserKey
		if r.OnRedisFailure == "" {
			r.OnRedisFailure = FailLocal
		}
		for _, t := range r.tierNames() {
			tiers[strings.ToUpper(t)] = true
		}
		for _, d := range r.c.dims {
			if d.kind == dimAttr {
				attrs[d.attr] = true
			}
		}
		s.rules = append(s.rules, &r)
		s.byID[r.ID] = &r
	}
	slices.SortStableFunc(s.rules, func(a, b *Rule) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	for _, r := range s.rules {
		if r.Descriptor == nil {
			s.requestRules = append(s.requestRules, r)
			if r.SpentByReports() {
				s.reportRules = append(s.reportRules, r)
			}
			if r.Algorithm == decide.Concurrency {
				s.holdRules = append(s.holdRules, r)
			}
		}
	}
	var err error
	if s.descriptors, err = indexDescriptors(s.rules); err != nil {
		return nil, err
	}
	for domain, root := range s.descriptors {
		root.overrides = newOverrides(domain, opts.KeyPrefix)
	}
	s.tiers = sortedKeys(tiers)
	s.attrs = sortedKeys(attrs)
	return s, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func compileRule(r *Rule, prefix string) *compiled {
	c := &compiled{
		head:        prefix + "{" + r.ID + "|",
		suffix:      stateSuffix(r.Algorithm),
		limits:      compileLimitSet(r.Limits, r.Tiers),
		penalty:     r.Penalty.Std(),
		escalations: compileEscalations(r.Escalate),
		ipv6Bits:    cmp.Or(r.IPv6Prefix, DefaultIPv6Prefix),
	}
	for _, e := range r.Match.Endpoints {
		c.endpoints = append(c.endpoints, mustCompilePattern(e))
	}
	for _, m := range r.Match.Methods {
		if m = strings.ToUpper(m); !slices.Contains(c.methods, m) {
			c.methods = append(c.methods, m)
		}
	}
	for _, t := range r.Match.Tiers {
		c.tiers = append(c.tiers, strings.ToUpper(t))
	}
	for _, k := range r.Key {
		d, _ := parseDimension(k) // validated
		c.dims = append(c.dims, d)
		c.names = append(c.names, d.name)
	}
	c.blocks = r.Descriptor != nil && blockingLimit(r.Limits)
	for _, e := range r.Schedule {
		c.schedule = append(c.schedule, compileWindow(e))
	}
	return c
}

// tierNames lists every tier the rule names: match, overrides, schedules.
func (r *Rule) tierNames() []string {
	out := slices.Clone(r.Match.Tiers)
	for t := range r.Tiers {
		out = append(out, t)
	}
	for _, e := range r.Schedule {
		for t := range e.Tiers {
			out = append(out, t)
		}
	}
	return out
}

func compileExempt(e Exempt, userKey func(string) string) compiledExempt {
	ce := compiledExempt{users: make(map[string]struct{}, len(e.Users))}
	for _, t := range e.Tiers {
		ce.tiers = append(ce.tiers, strings.ToUpper(t))
	}
	for _, s := range e.IPs {
		p, _ := ipprefix.Parse(s) // validated
		ce.prefixes = append(ce.prefixes, p)
	}
	for _, s := range e.Endpoints {
		ce.endpoints = append(ce.endpoints, mustCompilePattern(s))
	}
	for _, u := range e.Users {
		ce.users[userKey(u)] = struct{}{}
	}
	return ce
}

// Rules returns the rules in evaluation order (priority, then id). The
// rules are shared: do not modify them.
func (s *Set) Rules() []*Rule { return s.rules }

// Rule returns the rule with id, or nil.
func (s *Set) Rule(id string) *Rule { return s.byID[id] }

// Tiers returns every tier named anywhere in the rule set (matches,
// overrides, schedules, exemptions), upper-cased and sorted: the bounded
// values of a tier metric label.
func (s *Set) Tiers() []string { return s.tiers }

// AttrNames returns the attribute names used by attr:<name> key
// dimensions, sorted.
func (s *Set) AttrNames() []string { return s.attrs }

// UserKey returns the key of a user id, the form in which user-keyed rules,
// exemptions, bans and detection know an account: its fold (userid.Fold)
// unless the set was compiled with Options.CaseSensitiveUserIDs, the id as
// sent then.
func (s *Set) UserKey(id string) string {
	if s.exactUsers {
		return id
	}
	return userid.Fold(id)
}

// Detection returns the detection settings, defaults filled in.
func (s *Set) Detection() Detection { return s.detection }
