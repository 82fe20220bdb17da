// Package rules is the rule configuration of ratewarden: the rules file
// schema (YAML, and JSON for one rule of the admin API), its validation, and
// the compiled rule set the limiter consults on every request (endpoint
// matching without regular expressions, exemptions, and Redis key building).
//
// The package is pure: it imports no driver and does no I/O beyond LoadFile.
package rules

import (
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// File is a rules file.
type File struct {
	Rules     []Rule    `yaml:"rules" json:"rules"`
	Exempt    Exempt    `yaml:"exempt,omitempty" json:"exempt,omitzero"`
	Detection Detection `yaml:"detection,omitempty" json:"detection,omitzero"`
}

// Rule is one rate-limit rule. The same type is the compiled rule returned
// by Set.Rules and Applied.Rule; there it also carries the compiled matchers
// (unexported) and must be treated as read-only.
type Rule struct {
	// ID is unique in a rule set: ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$.
	ID string `yaml:"id" json:"id"`
	// Priority orders evaluation and reporting; lower first, default 100.
	Priority int   `yaml:"priority" json:"priority"`
	Match    Match `yaml:"match,omitempty" json:"match,omitzero"`
	// Key lists the dimensions whose values identify a subject: ip, user_id,
	// endpoint, method, tier, attr:<name>.
	Key       []string         `yaml:"key" json:"key"`
	Algorithm decide.Algorithm `yaml:"algorithm" json:"algorithm"`
	// Limits are all checked; any exceeded denies. 1 to 8.
	Limits []Limit `yaml:"limits" json:"limits"`
	// Penalty keeps a key denied this long once a limit is exceeded; 0: none.
	Penalty Duration `yaml:"penalty,omitempty" json:"penalty,omitzero"`
	// Shadow rules decide and report but never deny.
	Shadow         bool          `yaml:"shadow,omitempty" json:"shadow,omitzero"`
	OnRedisFailure FailurePolicy `yaml:"on_redis_failure" json:"on_redis_failure"`
	// Debit and SpentBy answer two questions about the calls that spend
	// the budget: SpentBy, which kind of call spends it; Debit, whether
	// such a call that does not fit is debited all the same.
	//
	// Debit: DebitAdmitted (only admitted calls are debited; the default of
	// request rules) or DebitAlways (denied calls too, as
	// envoyproxy/ratelimit counts; the default of descriptor rules, and
	// what reports always do). See DebitPolicy and Rule.DebitsDenied.
	Debit DebitPolicy `yaml:"debit,omitempty" json:"debit,omitempty"`
	// SpentBy: SpentByCheck (the default: checks, /v1/check and /v1/auth)
	// or SpentByReport (the outcome reports of POST /v1/report). See
	// SpendingCall.
	SpentBy SpendingCall `yaml:"spent_by,omitempty" json:"spent_by,omitempty"`
	// Statuses, for a rule spent by reports, are the HTTP statuses of the
	// reports that spend it (401 and 403 for failed logins); empty: every
	// report.
	Statuses []int `yaml:"statuses,omitempty" json:"statuses,omitempty"`
	// Reserve, for a rule spent by reports, is the units a check reserves
	// when it gives no estimate of its own: the check is admitted only if
	// they fit, they stay spent until the request's report settles them
	// with its actual cost, and a reservation nobody settles lapses after
	// ReserveHold keeping them spent (see reserve.go). 0: checks only ask
	// whether a unit is left.
	Reserve int64 `yaml:"reserve,omitempty" json:"reserve,omitzero"`
	// ReserveHold is how long a reservation lasts unsettled; 0:
	// DefaultReserveHold.
	ReserveHold Duration `yaml:"reserve_hold,omitempty" json:"reserve_hold,omitzero"`
	// Tiers overrides Limits per tier (tier names compare case-insensitively).
	Tiers map[string][]Limit `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	// Schedule replaces the limits (and optionally the penalty) while an entry
	// is active; the first active entry wins.
	Schedule []ScheduleEntry `yaml:"schedule,omitempty" json:"schedule,omitempty"`
	// Escalate holds a key denied for longer when it keeps being denied.
	Escalate []Escalation `yaml:"escalate,omitempty" json:"escalate,omitempty"`
	// Lease, when set (and not written false), makes limiters lease the
	// budget of the rule's keys and answer from memory (see Lease and
	// Rule.Leased). Not with sliding_window, penalty, escalate or
	// spent_by: report.
	Lease *Lease `yaml:"lease,omitempty" json:"lease,omitempty"`
	// IPv6Prefix groups IPv6 clients for the ip key dimension, and for a
	// descriptor rule the levels holding the client address: every
	// address of one /IPv6Prefix shares one budget. 0 (absent) means
	// DefaultIPv6Prefix (64), 128 no grouping; at least MinIPv6Prefix.
	// IPv4 addresses are never grouped.
	IPv6Prefix int `yaml:"ipv6_prefix,omitempty" json:"ipv6_prefix,omitzero"`
	// Descriptor, when set, makes this a descriptor rule of Envoy's rate
	// limit API instead of a rule for /v1/check and /v1/auth.
	Descriptor *DescriptorMatch `yaml:"descriptor,omitempty" json:"descriptor,omitempty"`

	c *compiled // set by Compile on the Set's own copy
}

// Match selects the requests a rule applies to. Every non-empty list must
// match; an empty list matches anything.
type Match struct {
	// Endpoints are Ant-style patterns (?, *, **) over normalized paths.
	Endpoints []string `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	// Methods are compared case-insensitively (stored upper-case).
	Methods []string `yaml:"methods,omitempty" json:"methods,omitempty"`
	// Tiers are compared case-insensitively.
	Tiers []string `yaml:"tiers,omitempty" json:"tiers,omitempty"`
}

// Limit is one limit as written in the rules file. Window algorithms
// (fixed_window, sliding_window, sliding_window_counter) use Requests per
// Per; token_bucket uses Rate tokens every Per and a capacity of Burst;
// concurrency admits Concurrent requests in flight at once, each hold
// lapsing Hold after it was taken when nobody reports it (default
// DefaultHold). The fields of the other kinds must be absent (zero).
type Limit struct {
	Requests   int64    `yaml:"requests,omitempty" json:"requests,omitzero"`
	Rate       int64    `yaml:"rate,omitempty" json:"rate,omitzero"`
	Burst      int64    `yaml:"burst,omitempty" json:"burst,omitzero"`
	Per        Duration `yaml:"per,omitempty" json:"per,omitzero"`
	Concurrent int64    `yaml:"concurrent,omitempty" json:"concurrent,omitzero"`
	Hold       Duration `yaml:"hold,omitempty" json:"hold,omitzero"`
}

// DefaultHold is the lifetime of a concurrency limit's holds when the
// limit leaves hold out.
const DefaultHold = time.Minute

// Decide converts l to the decision model. A concurrency limit is
// decide.Limit{Requests: Concurrent, Per: Hold}.
func (l Limit) Decide() decide.Limit {
	if l.Concurrent > 0 {
		hold := l.Hold.Std()
		if hold == 0 {
			hold = DefaultHold
		}
		return decide.Limit{Requests: l.Concurrent, Per: hold}
	}
	return decide.Limit{Requests: l.Requests, Rate: l.Rate, Burst: l.Burst, Per: l.Per.Std()}
}

// DebitPolicy says whether a call of a rule that does not fit (and is
// denied) is debited all the same. Which calls those are is the rule's
// SpendingCall.
type DebitPolicy string

// The debit policies.
const (
	// DebitAdmitted: a call is counted only when admitted, so usage never
	// passes the limit and a call of cost 0 is always admitted.
	DebitAdmitted DebitPolicy = "admitted"
	// DebitAlways: every call is counted, whether it fits or not. A cost
	// known only after the response (tokens an LLM used) is reported as a
	// call of that cost and may push usage past the limit; calls are then
	// denied, a check of cost 0 included, until the window frees enough.
	DebitAlways DebitPolicy = "always"
)

// DebitsDenied reports whether the rule counts the cost of a denied call:
// its Debit, or when absent its kind's default (descriptor rules: always).
func (r *Rule) DebitsDenied() bool {
	if r.Debit == "" {
		return r.Descriptor != nil
	}
	return r.Debit == DebitAlways
}

// SpendingCall is the kind of call that spends a rule's budget (the rules
// file's spent_by). Whether such a call is debited when it does not fit
// is the rule's DebitPolicy.
type SpendingCall string

// The kinds of call that can spend a rule's budget.
const (
	// SpentByCheck: each check (/v1/check, /v1/auth) debits its cost as
	// the rule's debit policy says.
	SpentByCheck SpendingCall = "check"
	// SpentByReport: outcome reports (/v1/report) whose status is in the
	// rule's statuses debit their cost, always, even past the limit
	// (known after the response, a cost cannot be refused); a check only
	// asks whether a unit is left (decide.Call.Probe) and is refused once
	// none is, until the window frees one.
	SpentByReport SpendingCall = "report"
)

// SpentByReports reports whether outcome reports spend the rule's budget.
func (r *Rule) SpentByReports() bool { return r.SpentBy == SpentByReport }

// Spends reports whether a report of status spends the rule's budget: a
// rule spent by reports, with status among its statuses or none listed.
func (r *Rule) Spends(status int) bool {
	return r.SpentByReports() && (len(r.Statuses) == 0 || slices.Contains(r.Statuses, status))
}

// FailurePolicy says what a rule does when Redis cannot be reached.
type FailurePolicy string

// The failure policies.
const (
	FailLocal FailurePolicy = "local" // in-memory limiting (the default)
	FailAllow FailurePolicy = "allow"
	FailDeny  FailurePolicy = "deny"
)

// ScheduleEntry is a period during which its limits replace the rule's. It
// is either absolute (From and To, RFC 3339) or Daily, never both.
type ScheduleEntry struct {
	From  Timestamp `yaml:"from,omitempty" json:"from,omitzero"`
	To    Timestamp `yaml:"to,omitempty" json:"to,omitzero"`
	Daily *Daily    `yaml:"daily,omitempty" json:"daily,omitempty"`
	// Limits replace the rule's limits and tier overrides while active.
	Limits []Limit `yaml:"limits" json:"limits"`
	// Tiers overrides Limits per tier while active.
	Tiers map[string][]Limit `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	// Penalty, when set, replaces the rule's penalty while active.
	Penalty *Duration `yaml:"penalty,omitempty" json:"penalty,omitempty"`
}

// Daily is a time-of-day window in a time zone, evaluated on the wall clock:
// active when From <= local time < To. When To is earlier than From the
// window crosses midnight. To may be "24:00".
type Daily struct {
	From string `yaml:"from" json:"from"` // "HH:MM"
	To   string `yaml:"to" json:"to"`     // "HH:MM"
	TZ   string `yaml:"tz,omitempty" json:"tz,omitempty"`
}

// Escalation denies a key for Penalty once it has been denied by its limits
// Triggers times within Within. From and To, when set, bound the period in
// which the escalation is active (From inclusive, To exclusive).
type Escalation struct {
	Triggers int64     `yaml:"triggers" json:"triggers"`
	Within   Duration  `yaml:"within" json:"within"`
	Penalty  Duration  `yaml:"penalty" json:"penalty"`
	From     Timestamp `yaml:"from,omitempty" json:"from,omitzero"`
	To       Timestamp `yaml:"to,omitempty" json:"to,omitzero"`
}

// Exempt lists what is never limited. Detection never bans an exempt
// client, and an exempt address or endpoint skips bans too; a tier or user
// exemption never lifts the ban of the request's address (see
// Set.ExemptRequest, Set.ExemptUser).
type Exempt struct {
	Tiers     []string `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	IPs       []string `yaml:"ips,omitempty" json:"ips,omitempty"` // IPs or CIDRs
	Endpoints []string `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	Users     []string `yaml:"users,omitempty" json:"users,omitempty"`
}

// Detection configures the abuse detector. Sections left out of the file get
// the defaults of DefaultDetection; an explicitly empty ban list disables
// violation bans. For Grace, Samples, MaxClockSkew and the Escalation
// fields, zero (or absent) means the default.
type Detection struct {
	Warn   *WarnPolicy `yaml:"warn,omitempty" json:"warn,omitempty"`
	Ban    []BanPolicy `yaml:"ban" json:"ban"`
	Scan   *ScanPolicy `yaml:"scan,omitempty" json:"scan,omitempty"`
	DryRun bool        `yaml:"dry_run,omitempty" json:"dry_run,omitzero"`
	// Grace is how late (behind the newest event of its partition) an event
	// may be and still count; later events are counted and ignored.
	// Default 30s.
	Grace Duration `yaml:"grace,omitempty" json:"grace,omitzero"`
	// Escalation lengthens the bans of repeat offenders.
	Escalation EscalationPolicy `yaml:"escalation,omitempty" json:"escalation,omitzero"`
	// Samples is how many recently seen endpoints a ban carries as
	// evidence, 1 to 50. Default 5.
	Samples int `yaml:"samples,omitempty" json:"samples,omitzero"`
	// IPv6Prefix groups IPv6 offenders: the detector counts every address
	// of one /IPv6Prefix as one offender and bans the prefix, and the
	// limiters' admin API bans IPv6 addresses by it. MinIPv6Prefix to 128
	// (no grouping). Default DefaultIPv6Prefix (64).
	IPv6Prefix int `yaml:"ipv6_prefix,omitempty" json:"ipv6_prefix,omitzero"`
	// MaxClockSkew is how far ahead of the detector's clock an event time
	// may be; an event further ahead never advances the detector's time.
	// 1ms to 1h; default 1m.
	MaxClockSkew Duration `yaml:"max_clock_skew,omitempty" json:"max_clock_skew,omitzero"`
	// The scenarios detected from the outcomes topic (see outcomes.go);
	// each left out gets DefaultDetection's.
	CredentialStuffing *CredentialStuffingPolicy `yaml:"credential_stuffing,omitempty" json:"credential_stuffing,omitempty"`
	BruteForce         *BruteForcePolicy         `yaml:"brute_force,omitempty" json:"brute_force,omitempty"`
	AccountAttack      *AccountAttackPolicy      `yaml:"account_attack,omitempty" json:"account_attack,omitempty"`
	Probing            *ProbingPolicy            `yaml:"probing,omitempty" json:"probing,omitempty"`
}

// EscalationPolicy makes a new ban last base duration × Factor^n, at most
// Cap, where n is the number of bans the offender received within Period
// before it. Cap also bounds a first ban.
type EscalationPolicy struct {
	Factor int64    `yaml:"factor,omitempty" json:"factor,omitzero"` // default 2; 1 disables escalation
	Cap    Duration `yaml:"cap,omitempty" json:"cap,omitzero"`       // default 24h
	Period Duration `yaml:"period,omitempty" json:"period,omitzero"` // default 24h
}

// Detection defaults for the scalar settings.
const (
	defaultGrace            = 30 * time.Second
	defaultEscalationFactor = 2
	defaultEscalationCap    = 24 * time.Hour
	defaultEscalationPeriod = 24 * time.Hour
	DefaultSamples          = 5
	maxSamples              = 50
	DefaultMaxClockSkew     = time.Minute
	maxClockSkew            = time.Hour // as file.go's message says
)

// WarnPolicy emits a warning after Violations denials within Within.
type WarnPolicy struct {
	Violations int64    `yaml:"violations" json:"violations"`
	Within     Duration `yaml:"within" json:"within"`
}

// BanPolicy bans for Duration after Violations denials within Within.
type BanPolicy struct {
	Violations int64    `yaml:"violations" json:"violations"`
	Within     Duration `yaml:"within" json:"within"`
	Duration   Duration `yaml:"duration" json:"duration"`
}

// ScanPolicy bans for Duration after DistinctEndpoints distinct endpoints
// within Within.
type ScanPolicy struct {
	DistinctEndpoints int64    `yaml:"distinct_endpoints" json:"distinct_endpoints"`
	Within            Duration `yaml:"within" json:"within"`
	Duration          Duration `yaml:"duration" json:"duration"`
}

// DefaultDetection returns the detection settings of the contract, used for
// every section the file leaves out.
func DefaultDetection() Detection {
	return Detection{
		Warn:  &WarnPolicy{Violations: 20, Within: Duration(5 * time.Minute)},
		Ban:   []BanPolicy{{Violations: 100, Within: Duration(time.Hour), Duration: Duration(time.Hour)}},
		Scan:  &ScanPolicy{DistinctEndpoints: 50, Within: Duration(10 * time.Second), Duration: Duration(time.Hour)},
		Grace: Duration(defaultGrace),
		Escalation: EscalationPolicy{
			Factor: defaultEscalationFactor,
			Cap:    Duration(defaultEscalationCap),
			Period: Duration(defaultEscalationPeriod),
		},
		Samples:      DefaultSamples,
		IPv6Prefix:   DefaultIPv6Prefix,
		MaxClockSkew: Duration(DefaultMaxClockSkew),
	}.withOutcomeDefaults()
}

// WithDefaults returns d with the sections left out and the zero scalar
// settings filled from DefaultDetection. Parse and Compile apply it; code
// that builds a Detection by hand calls it before use.
func (d Detection) WithDefaults() Detection {
	def := DefaultDetection()
	if d.Warn == nil {
		d.Warn = def.Warn
	}
	if d.Ban == nil {
		d.Ban = def.Ban
	}
	if d.Scan == nil {
		d.Scan = def.Scan
	}
	if d.Grace == 0 {
		d.Grace = def.Grace
	}
	if d.Escalation.Factor == 0 {
		d.Escalation.Factor = def.Escalation.Factor
	}
	if d.Escalation.Cap == 0 {
		d.Escalation.Cap = def.Escalation.Cap
	}
	if d.Escalation.Period == 0 {
		d.Escalation.Period = def.Escalation.Period
	}
	if d.Samples == 0 {
		d.Samples = def.Samples
	}
	if d.IPv6Prefix == 0 {
		d.IPv6Prefix = def.IPv6Prefix
	}
	if d.MaxClockSkew == 0 {
		d.MaxClockSkew = def.MaxClockSkew
	}
	return d.withOutcomeDefaults()
}
