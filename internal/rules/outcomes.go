package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/endpoint"
)

// The detection scenarios below are read from the outcomes topic (what
// happened after a response: the HTTP status the client got), where the
// other detection settings read the decisions. Each counts failures: the
// outcomes whose status is one of its Statuses (and, when it lists
// Endpoints, whose endpoint matches one of them). A source is the client
// IP, or for IPv6 its prefix (Detection.IPv6Prefix). "More than N" means a
// count above N: a threshold of 10 fires on the 11th.

// OutcomeScenario holds what every outcome scenario has besides its
// threshold.
type OutcomeScenario struct {
	// Enabled false turns the scenario off (its other fields are then
	// ignored); absent means on.
	Enabled *bool `yaml:"enabled,omitempty" json:"enabled,omitempty"`
	// Within is the sliding window the threshold applies to.
	Within Duration `yaml:"within,omitempty" json:"within,omitzero"`
	// Duration is how long the ban lasts (escalated like the others).
	Duration Duration `yaml:"duration,omitempty" json:"duration,omitzero"`
	// Statuses are the HTTP statuses that count as failures. Absent: the
	// scenario's default (401 and 403; 404 for probing).
	Statuses []int `yaml:"statuses,omitempty" json:"statuses,omitempty"`
	// Endpoints, Ant-style patterns as in rules, restrict the failures
	// counted to those endpoints; empty: any endpoint.
	Endpoints []string `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	// DryRun publishes the scenario's bans with dry_run=true and enforces
	// nothing; OR-ed with Detection.DryRun.
	DryRun bool `yaml:"dry_run,omitempty" json:"dry_run,omitzero"`
}

// On reports whether the scenario is enabled.
func (s *OutcomeScenario) On() bool { return s != nil && (s.Enabled == nil || *s.Enabled) }

// CredentialStuffingPolicy bans a source whose failures name more than
// DistinctUsers distinct user ids within Within.
type CredentialStuffingPolicy struct {
	DistinctUsers   int64 `yaml:"distinct_users,omitempty" json:"distinct_users,omitzero"`
	OutcomeScenario `yaml:",inline"`
}

// BruteForcePolicy bans a source with more than Failures failures within
// Within.
type BruteForcePolicy struct {
	Failures        int64 `yaml:"failures,omitempty" json:"failures,omitzero"`
	OutcomeScenario `yaml:",inline"`
}

// AccountAttackPolicy protects one account (user id): when its failures
// come from more than DistinctSources distinct networks within Within,
// each of those sources is banned (and each new one after), and a warning
// names the account. The account itself is banned only when LockAccount
// is positive, for that long.
//
// Sources are counted by network (IPv4Prefix, IPv6Prefix), so that the
// addresses one party holds in numbers (the /64s of an IPv6 site) count
// once; bans stay per source. A source with a success (SuccessStatus, by
// a SuccessMethod) on the account within Within is its owner's and is not
// banned.
type AccountAttackPolicy struct {
	DistinctSources int64    `yaml:"distinct_sources,omitempty" json:"distinct_sources,omitzero"`
	LockAccount     Duration `yaml:"lock_account,omitempty" json:"lock_account,omitzero"`
	// IPv4Prefix and IPv6Prefix are the networks sources are counted in
	// (0: DefaultAccountIPv4Prefix, DefaultAccountIPv6Prefix). An IPv6
	// network is never narrower than a source (Detection.IPv6Prefix).
	IPv4Prefix int `yaml:"ipv4_prefix,omitempty" json:"ipv4_prefix,omitzero"`
	IPv6Prefix int `yaml:"ipv6_prefix,omitempty" json:"ipv6_prefix,omitzero"`
	// SuccessStatuses are the statuses that show the account's owner at a
	// source; absent: every 2xx that is not one of Statuses.
	SuccessStatuses []int `yaml:"success_statuses,omitempty" json:"success_statuses,omitempty"`
	// SuccessMethods are the request methods whose successes show the
	// owner; absent: every method but the safe ones (safeMethods).
	SuccessMethods  []string `yaml:"success_methods,omitempty" json:"success_methods,omitempty"`
	OutcomeScenario `yaml:",inline"`
}

// safeMethods are the methods RFC 9110 defines as safe: they change
// nothing on the server, so no login is one, and a 2xx answering one (a
// GET of the login form, its user field filled from the query) shows
// nothing of who holds the password. By default their successes do not
// show an account's owner.
var safeMethods = []string{"GET", "HEAD", "OPTIONS", "TRACE"}

// The networks an account attack counts sources in, by default: an IPv4
// address is a network of its own, an IPv6 /48 is a site (what a
// registry's policy gives one end customer at most, so its 65 536 /64s are
// one party's).
const (
	DefaultAccountIPv4Prefix = 32
	DefaultAccountIPv6Prefix = 48
	// MinAccountIPv4Prefix is the coarsest IPv4 network accepted: a shorter
	// prefix would count unrelated networks as one.
	MinAccountIPv4Prefix = 16
)

// Networks returns the prefixes sources are counted in, defaults filled
// in, the IPv6 one no longer than sourceIPv6 (Detection.IPv6Prefix, 0:
// its default), so that a network holds whole sources.
func (p *AccountAttackPolicy) Networks(sourceIPv6 int) (ipv4, ipv6 int) {
	ipv4, ipv6 = cmp.Or(p.IPv4Prefix, DefaultAccountIPv4Prefix), cmp.Or(p.IPv6Prefix, DefaultAccountIPv6Prefix)
	return ipv4, min(ipv6, cmp.Or(sourceIPv6, DefaultIPv6Prefix))
}

// SuccessStatus reports whether status shows the account's owner: one of
// SuccessStatuses, or when there are none a 2xx that is not a failure.
func (p *AccountAttackPolicy) SuccessStatus(status int) bool {
	if p.SuccessStatuses != nil {
		return slices.Contains(p.SuccessStatuses, status)
	}
	return status >= 200 && status <= 299 && !slices.Contains(p.failureStatuses(), status)
}

// SuccessMethod reports whether a success answering method (case
// insensitive; empty is GET, as the limiter takes it) shows the account's
// owner: one of SuccessMethods, or when there are none a method that is
// not safe (safeMethods).
func (p *AccountAttackPolicy) SuccessMethod(method string) bool {
	method = cmp.Or(method, "GET")
	is := func(m string) bool { return strings.EqualFold(m, method) }
	if p.SuccessMethods != nil {
		return slices.ContainsFunc(p.SuccessMethods, is)
	}
	return !slices.ContainsFunc(safeMethods, is)
}

// failureStatuses are Statuses, or their default when left out.
func (p *AccountAttackPolicy) failureStatuses() []int {
	if p.Statuses == nil {
		return DefaultAuthFailureStatuses
	}
	return p.Statuses
}

// ProbingPolicy bans a source for which more than DistinctEndpoints
// distinct endpoints answered a failure status within Within.
type ProbingPolicy struct {
	DistinctEndpoints int64 `yaml:"distinct_endpoints,omitempty" json:"distinct_endpoints,omitzero"`
	OutcomeScenario   `yaml:",inline"`
}

// MaxOutcomeThreshold bounds the thresholds of the outcome scenarios: the
// detector keeps up to threshold + 1 members per offender and scenario,
// and an account attack bans that many sources at once.
const MaxOutcomeThreshold = 10000

// DefaultAuthFailureStatuses are the failure statuses of credential
// stuffing, brute force and account attack when the file names none;
// DefaultProbingStatuses those of probing.
var (
	DefaultAuthFailureStatuses = []int{401, 403}
	DefaultProbingStatuses     = []int{404}
)

func defaultOutcomeScenario(within time.Duration, statuses []int) OutcomeScenario {
	return OutcomeScenario{Within: Duration(within), Duration: Duration(time.Hour), Statuses: slices.Clone(statuses)}
}

// withOutcomeDefaults fills the outcome scenarios left out, and the
// statuses left out of those present.
func (d Detection) withOutcomeDefaults() Detection {
	if d.CredentialStuffing == nil {
		d.CredentialStuffing = &CredentialStuffingPolicy{DistinctUsers: 10,
			OutcomeScenario: defaultOutcomeScenario(10*time.Minute, DefaultAuthFailureStatuses)}
	}
	if d.BruteForce == nil {
		d.BruteForce = &BruteForcePolicy{Failures: 20,
			OutcomeScenario: defaultOutcomeScenario(5*time.Minute, DefaultAuthFailureStatuses)}
	}
	if d.AccountAttack == nil {
		d.AccountAttack = &AccountAttackPolicy{DistinctSources: 10,
			OutcomeScenario: defaultOutcomeScenario(10*time.Minute, DefaultAuthFailureStatuses)}
	}
	if d.Probing == nil {
		d.Probing = &ProbingPolicy{DistinctEndpoints: 20,
			OutcomeScenario: defaultOutcomeScenario(time.Minute, DefaultProbingStatuses)}
	}
	// Copies, so filling statuses never writes through a caller's pointer.
	fill := func(s *OutcomeScenario, def []int) {
		if s.Statuses == nil {
			s.Statuses = slices.Clone(def)
		}
	}
	cs, bf, aa, pr := *d.CredentialStuffing, *d.BruteForce, *d.AccountAttack, *d.Probing
	fill(&cs.OutcomeScenario, DefaultAuthFailureStatuses)
	fill(&bf.OutcomeScenario, DefaultAuthFailureStatuses)
	fill(&aa.OutcomeScenario, DefaultAuthFailureStatuses)
	fill(&pr.OutcomeScenario, DefaultProbingStatuses)
	d.CredentialStuffing, d.BruteForce, d.AccountAttack, d.Probing = &cs, &bf, &aa, &pr
	return d
}

// validateOutcomeScenarios reports the problems of the outcome scenarios
// that are present and enabled.
func validateOutcomeScenarios(d Detection, p problems) {
	if s := d.CredentialStuffing; s != nil {
		validateOutcomeScenario(p.at("credential_stuffing"), "distinct_users", s.DistinctUsers, &s.OutcomeScenario)
	}
	if s := d.BruteForce; s != nil {
		validateOutcomeScenario(p.at("brute_force"), "failures", s.Failures, &s.OutcomeScenario)
	}
	if s := d.AccountAttack; s != nil {
		validateAccountAttack(p.at("account_attack"), s)
	}
	if s := d.Probing; s != nil {
		validateOutcomeScenario(p.at("probing"), "distinct_endpoints", s.DistinctEndpoints, &s.OutcomeScenario)
	}
}

func validateAccountAttack(p problems, s *AccountAttackPolicy) {
	if !validateOutcomeScenario(p, "distinct_sources", s.DistinctSources, &s.OutcomeScenario) {
		return
	}
	if s.LockAccount < 0 {
		p.add("lock_account", "must not be negative (0: never lock the account)")
	}
	if b := s.IPv4Prefix; b != 0 && (b < MinAccountIPv4Prefix || b > 32) {
		p.add("ipv4_prefix", "must be between %d and 32 (a shorter prefix would count unrelated networks as one; 32: per address)", MinAccountIPv4Prefix)
	}
	validateIPv6Prefix(p, "ipv6_prefix", s.IPv6Prefix)
	if s.SuccessStatuses != nil && len(s.SuccessStatuses) == 0 {
		p.add("success_statuses", "must list at least one HTTP status (leave it out for every 2xx)")
	}
	if s.SuccessMethods != nil && len(s.SuccessMethods) == 0 {
		p.add("success_methods", "must list at least one HTTP method (leave it out for every method but GET, HEAD, OPTIONS and TRACE)")
	}
	for i, m := range s.SuccessMethods {
		if !validMethod(m) {
			p.add(fmt.Sprintf("success_methods[%d]", i), "%q is not an HTTP method token", truncate(m, 40))
		}
	}
	failures := s.failureStatuses()
	for i, st := range s.SuccessStatuses {
		switch {
		case st < 100 || st > 599:
			p.add(fmt.Sprintf("success_statuses[%d]", i), "%d is not an HTTP status (100 to 599)", st)
		case slices.Contains(failures, st):
			p.add(fmt.Sprintf("success_statuses[%d]", i), "%d is also a failure status", st)
		}
	}
}

// validateOutcomeScenario checks one scenario and reports whether it is
// enabled (a disabled one is not checked further).
func validateOutcomeScenario(p problems, thresholdField string, threshold int64, s *OutcomeScenario) bool {
	if !s.On() {
		return false
	}
	if threshold < 1 || threshold > MaxOutcomeThreshold {
		p.add(thresholdField, "must be between 1 and %d", MaxOutcomeThreshold)
	}
	positive(p, "within", s.Within)
	positive(p, "duration", s.Duration)
	if len(s.Statuses) == 0 {
		p.add("statuses", "must list at least one HTTP status (leave it out for the default)")
	}
	for i, st := range s.Statuses {
		if st < 100 || st > 599 {
			p.add(fmt.Sprintf("statuses[%d]", i), "%d is not an HTTP status (100 to 599)", st)
		}
	}
	for i, e := range s.Endpoints {
		if _, err := compilePattern(e); err != nil {
			p.add(fmt.Sprintf("endpoints[%d]", i), "%q: %v", truncate(e, 80), err)
		}
	}
	return true
}

// EndpointSet matches an endpoint against a scenario's Endpoints.
type EndpointSet struct {
	patterns []endpointPattern
}

// CompileEndpoints compiles Ant-style endpoint patterns (as rules and
// exemptions write them). An empty list matches every endpoint.
func CompileEndpoints(patterns []string) (EndpointSet, error) {
	var s EndpointSet
	for _, raw := range patterns {
		p, err := compilePattern(raw)
		if err != nil {
			return EndpointSet{}, fmt.Errorf("endpoint pattern %q: %w", truncate(raw, 80), err)
		}
		s.patterns = append(s.patterns, p)
	}
	return s, nil
}

// Match reports whether path (normalized as the limiter normalizes
// request paths) matches one of the patterns, or there are none.
func (s EndpointSet) Match(path string) bool {
	if len(s.patterns) == 0 {
		return true
	}
	path = endpoint.Normalize(path)
	for _, p := range s.patterns {
		if p.Match(path) {
			return true
		}
	}
	return false
}
