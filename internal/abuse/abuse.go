// Package abuse turns the detector's events into warnings and bans, on
// event time, by the thresholds of the rules file's detection section.
// Engine reads decisions: per offender (client IP, user) it keeps
// violations over several windows and distinct endpoints over a short one.
// OutcomeEngine reads outcomes (reports, access-log lines) and applies the
// outcome scenarios over distinct sets. Both process a batch in the same
// steps and issue through one Ledger (bans already issued, escalation). State lives behind small interfaces: Windows, Distinct and
// Ledger, implemented on Redis by package redisabuse, so state survives
// restarts and is shared by every detector instance; their in-memory
// references are in testkit/abusetest.
package abuse

import (
	"context"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Offender is who a ban applies to: scope event.ScopeIP or event.ScopeUser.
// An ip offender's Subject is an IPv4 address or, for IPv6 clients, their
// prefix as rules.IPSubject writes it ("2001:db8:1:2::/64", or the address
// when detection.ipv6_prefix is 128).
type Offender struct {
	Scope   string
	Subject string
}

// Sighting is one decision event as seen for one offender.
type Sighting struct {
	Offender Offender
	EventID  string
	TS       time.Time
	Endpoint string
	// Violation: the decision was denied or shadow-limited, and not because
	// of a ban (bans never feed new bans).
	Violation bool
}

// WindowSpec says which windows Windows must tally.
type WindowSpec struct {
	// Violations are the distinct violation windows, ascending.
	Violations []time.Duration
	// Scan is the distinct-endpoint window; ScanCap bounds the endpoints
	// tracked per offender (the scan threshold + 1 is enough to decide).
	Scan    time.Duration
	ScanCap int64
	// MaxViolations bounds the violations kept per offender (the newest).
	MaxViolations int64
	// Samples is how many recent endpoints a Tally carries as evidence.
	Samples int
	// Grace is how far behind the newest event an event may be and still be
	// counted; state older than the largest window plus Grace is dropped.
	Grace time.Duration
	// ScanThreshold and ViolationThresholds say from which counts a Tally
	// carries evidence (see Tally): ScanThreshold for Endpoints, and
	// ViolationThresholds[i] for Violations[i] (per window, the smallest
	// threshold using it; missing entries are zero). Zero means always.
	ScanThreshold       int64
	ViolationThresholds []int64
}

// ViolationThreshold returns ViolationThresholds[i], zero when missing.
func (s WindowSpec) ViolationThreshold(i int) int64 {
	if i < len(s.ViolationThresholds) {
		return s.ViolationThresholds[i]
	}
	return 0
}

// NeedsSamples reports whether a tally with these counts carries samples.
func (s WindowSpec) NeedsSamples(t *Tally) bool {
	if t.Endpoints >= s.ScanThreshold {
		return true
	}
	for i, n := range t.Violations {
		if n >= s.ViolationThreshold(i) {
			return true
		}
	}
	return false
}

// Tally is an offender's windows right after recording a sighting, anchored
// at the newest event time seen for that offender (Newest). Parts are left
// out where no threshold can be crossed, so the engine, which reads them
// only from its thresholds on, issues the same bans and warnings.
type Tally struct {
	Newest time.Time
	// Violations[i] counts violations with time in [Newest-w, Newest] for
	// w = spec.Violations[i]; FirstViolation[i] is the oldest of them (zero
	// when none); LastViolation is the newest violation kept. They are
	// tallied only for a violation sighting (a count rises only when a
	// violation is added): for any other sighting Violations and
	// FirstViolation are nil and LastViolation is zero.
	Violations     []int64
	FirstViolation []time.Time
	LastViolation  time.Time
	// Endpoints counts distinct endpoints whose latest sighting is in
	// [Newest-spec.Scan, Newest]; FirstEndpoint and LastEndpoint bound those
	// sightings when Endpoints >= spec.ScanThreshold (zero times otherwise).
	Endpoints     int64
	FirstEndpoint time.Time
	LastEndpoint  time.Time
	// SampleEndpoints are the most recently seen endpoints, newest first, at
	// most spec.Samples, only when Endpoints >= spec.ScanThreshold or some
	// Violations[i] >= spec.ViolationThreshold(i) (nil otherwise).
	SampleEndpoints []string
}

// Windows records sightings and returns one Tally per sighting, in order.
// Recording is idempotent: a violation is keyed by its event id and an
// endpoint by its name, so a redelivered event changes no count.
type Windows interface {
	Record(ctx context.Context, spec WindowSpec, sightings []Sighting) ([]Tally, error)
}

// Escalation lengthens the bans of repeat offenders: a ban lasts
// base × Factor^n, at most Cap, where n is the number of bans the offender
// received within Period before it.
type Escalation struct {
	Factor int64
	Cap    time.Duration
	Period time.Duration
}

// Claim asks the ledger to record a ban or a warning.
type Claim struct {
	// Ban carries everything but the final duration and expiry for a ban
	// (DurationS is the base duration); Action is event.ActionBan or
	// event.ActionWarn. BanID is derived by the caller (see BanID).
	Ban        event.Ban
	Escalation Escalation
	// WarnFor is how long a warning suppresses further warnings.
	WarnFor time.Duration
}

// Claimed is the ledger's answer to a Claim: the record it holds for the
// claim, and whether the caller must issue it.
type Claimed struct {
	// Ban is the ban as recorded: escalated DurationS and ExpiresAt for a
	// new ban, or the pending one recorded earlier.
	Ban event.Ban
	// Publish is true when the caller must publish Ban and then Settle it:
	// a new record, or one claimed earlier whose publication was never
	// settled (the process died in between). False: a no-op (an active ban
	// or warning of the offender already covers it).
	Publish bool
}

// Ledger remembers what was issued so a repeated detection is a no-op, and
// escalates repeat offenders. Protocol: Claim, publish to the ban topic,
// Settle. A crash anywhere repeats the publication (same BanID, which
// consumers deduplicate) but never loses it.
type Ledger interface {
	Claim(ctx context.Context, c Claim) (Claimed, error)
	// Settle marks the record published and, for a ban that is enforced
	// (not dry run) and not yet expired, writes the blacklist entry the
	// limiters enforce.
	Settle(ctx context.Context, ban event.Ban, enforce bool) error
}
