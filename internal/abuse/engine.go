package abuse

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// SourceDetector is the Source of the bans and warnings the engine issues.
const SourceDetector = "detector"

// Config is what the engine detects.
type Config struct {
	// Detection holds the thresholds; NewEngine fills what is left out
	// (rules.Detection.WithDefaults).
	Detection rules.Detection
	// Exempt reports the subjects of exempt clients (the service wires it
	// to rules.Set.Exempt): their events are skipped, so no decision of
	// such a client counts towards a ban. Nil: none.
	Exempt func(event.Subject) bool
	// UserKey returns the key of a user id, the subject of the user as an
	// offender (the service wires it to rules.Set.UserKey, as the limiters'
	// ban lookups): every spelling of one account is one offender. Nil: the
	// id as sent.
	UserKey func(string) string
	// Now is the detector's own clock, which bounds event time (see
	// Process). Nil: time.Now.
	Now func() time.Time
}

// Input is one decision event and the partition it was read from.
type Input struct {
	Partition int
	Event     event.Decision
}

// Stats counts what Process did with a batch.
type Stats struct {
	// Consumed counts every input; Late those older than their partition's
	// newest event by more than the grace; Skipped those never counted
	// (reason banned or exempt, or an exempt offender).
	Consumed, Late, Skipped int
	// Future counts the inputs whose time was more than the maximum clock
	// skew ahead of the detector's clock (decided at the detector's time);
	// Ahead says, per instance that stamped them, how far ahead the
	// furthest was (nil when none).
	Future int
	Ahead  map[string]time.Duration
	// Failures counts the outcomes (OutcomeEngine only) whose status is a
	// failure of some scenario and that were tallied; HeldAccounts those of
	// them on a banned or exempt account, tallied for their source only;
	// Successes those that show an account's owner (account_attack's
	// success statuses), recorded; Spared the sources an account attack did
	// not ban because they succeeded on the account.
	Failures, HeldAccounts, Successes, Spared int
	// Warnings and Bans count the outcomes to publish, by reason.
	Warnings, Bans map[string]int
}

// Publisher delivers bans and warnings; it returns once they are
// acknowledged.
type Publisher interface {
	Publish(ctx context.Context, bans ...event.Ban) error
}

// Engine applies the detection thresholds to batches of decision events
// and issues what they trigger: it claims each ban in the Ledger, publishes
// it, then settles it, so one owner holds the whole protocol. Its only
// state of its own is the newest event time per partition (for lateness);
// the windows and the bans issued live in Windows and Ledger. Process may
// be called concurrently, and SetConfig while it runs.
type Engine struct {
	cur atomic.Pointer[engine]
}

// engine is one configuration of an Engine: what SetConfig replaces. Its
// partitions' marks are the Engine's, shared by every configuration.
type engine struct {
	issuer[int]
	det      rules.Detection
	exempt   func(event.Subject) bool
	spec     WindowSpec
	windowOf map[time.Duration]int // violation window -> index in spec.Violations
	w        Windows
	userKey  func(string) string
}

// NewEngine returns an engine keeping its windows in w and its bans in l,
// and publishing what it issues with pub.
func NewEngine(cfg Config, w Windows, l Ledger, pub Publisher) *Engine {
	e := &Engine{}
	e.cur.Store(newEngine(cfg, w, newIssuer[int](cfg.Now, 0, 0, l, pub)))
	return e
}

// SetConfig puts cfg in force from the next batch on: its thresholds,
// exemptions and clock. The windows, the ledger, the publisher and the
// partitions' newest times are kept; a batch in progress finishes under
// the configuration it started with.
func (e *Engine) SetConfig(cfg Config) {
	old := e.cur.Load()
	e.cur.Store(newEngine(cfg, old.w, old.issuer))
}

func newEngine(cfg Config, w Windows, is issuer[int]) *engine {
	det := cfg.Detection.WithDefaults()
	is.now, is.skew, is.grace = clockOf(cfg.Now), det.MaxClockSkew.Std(), det.Grace.Std()
	e := &engine{issuer: is,
		det: det, exempt: cfg.Exempt, w: w, windowOf: map[time.Duration]int{}}
	e.userKey = keyOfUser(cfg.UserKey)
	var windows []time.Duration
	var maxV int64
	if det.Warn != nil {
		windows = append(windows, det.Warn.Within.Std())
		maxV = det.Warn.Violations
	}
	for _, b := range det.Ban {
		windows = append(windows, b.Within.Std())
		maxV = max(maxV, b.Violations)
	}
	slices.Sort(windows)
	windows = slices.Compact(windows)
	for i, d := range windows {
		e.windowOf[d] = i
	}
	e.spec = WindowSpec{
		Violations:    windows,
		MaxViolations: maxV,
		Samples:       det.Samples,
		Grace:         det.Grace.Std(),
	}
	// Evidence is only read from a threshold on (see claims).
	e.spec.ViolationThresholds = make([]int64, len(windows))
	for i := range e.spec.ViolationThresholds {
		e.spec.ViolationThresholds[i] = math.MaxInt64
	}
	lower := func(within time.Duration, v int64) {
		i := e.windowOf[within]
		e.spec.ViolationThresholds[i] = min(e.spec.ViolationThresholds[i], v)
	}
	if det.Warn != nil {
		lower(det.Warn.Within.Std(), det.Warn.Violations)
	}
	for _, b := range det.Ban {
		lower(b.Within.Std(), b.Violations)
	}
	e.spec.ScanThreshold = math.MaxInt64 // no scan: endpoints never need evidence
	if s := det.Scan; s != nil {
		e.spec.Scan = s.Within.Std()
		e.spec.ScanCap = s.DistinctEndpoints + 1
		e.spec.ScanThreshold = s.DistinctEndpoints
	}
	return e
}

// keyOfUser returns userKey, or the identity for nil.
func keyOfUser(userKey func(string) string) func(string) string {
	if userKey == nil {
		return func(id string) string { return id }
	}
	return userKey
}

// Spec returns the windows the engine asks Windows to tally.
func (e *Engine) Spec() WindowSpec {
	return e.cur.Load().spec_()
}

func (e *engine) spec_() WindowSpec {
	s := e.spec
	s.Violations = slices.Clone(s.Violations)
	s.ViolationThresholds = slices.Clone(s.ViolationThresholds)
	return s
}

// MaxClockSkew returns how far ahead of the detector's clock an event time
// is taken as it is (detection.max_clock_skew).
func (e *Engine) MaxClockSkew() time.Duration { return e.cur.Load().skew }

// BanReasons returns the reasons of the bans the engine in force issues.
func (e *Engine) BanReasons() []string { return e.cur.Load().banReasons() }

// WarnReasons returns the reasons of the warnings the engine in force
// issues.
func (e *Engine) WarnReasons() []string { return e.cur.Load().warnReasons() }

// Process counts a batch of events, in order, and claims, publishes and
// settles the bans and warnings they trigger (see issue). It returns what
// it published (each ban id once), in order. An event is late when it is older than the newest event seen on
// its partition (skipped events included) by more than the grace. On error
// nothing of the batch is kept by the engine (Windows and Ledger are
// idempotent, so the batch can be processed again).
//
// Event time is bounded by the detector's clock (Config.Now, read once per
// batch): an event more than the maximum clock skew ahead of it is decided
// at the detector's time (counted in Stats.Future), so a limiter whose
// clock jumped ahead is still detected but cannot move time forward; a
// partition's newest time never passes the detector's clock, whatever the
// skew, so no event can make the others late; and a ban is issued at the
// detector's time at the latest, so it never expires later than that plus
// its duration.
func (e *Engine) Process(ctx context.Context, in []Input) ([]Claimed, Stats, error) {
	return e.cur.Load().process(ctx, in)
}

func (e *engine) process(ctx context.Context, in []Input) ([]Claimed, Stats, error) {
	return process(ctx, &e.issuer, in, &windowTally{e: e,
		sightings: make([]Sighting, 0, 2*len(in)), events: make([]*event.Decision, 0, 2*len(in))})
}

// windowTally counts a batch of decision events in the engine's windows:
// a sighting per offender of each event (its client address, its user).
type windowTally struct {
	e         *engine
	sightings []Sighting
	events    []*event.Decision // the event of each sighting
	tallies   []Tally           // recorded, one per sighting
}

func (t *windowTally) place(in *Input) (int, time.Time, string) {
	return in.Partition, in.Event.TS, in.Event.Instance
}

func (t *windowTally) take(st *Stats, in *Input, at time.Time, late bool) {
	e, ev := t.e, &in.Event
	switch {
	case ev.Reason == event.ReasonBanned || ev.Reason == event.ReasonExempt || (e.exempt != nil && e.exempt(ev.Subject())):
		st.Skipped++
		return
	case late:
		st.Late++
		return
	}
	// A denial made without Redis is no evidence: local limits are
	// approximate, and a decision whose round trip timed out is refused
	// as a precaution, whatever the client did.
	violation := (!ev.Allowed || ev.Shadow) && ev.Mode != event.ModeLocal
	// An IPv6 client is its prefix: a scan or a flood spread over the
	// addresses of one /64 is one offender, and its ban covers them all.
	// The unspecified address stands for "no client address" (a rate
	// limit API call without one): nobody to ban.
	if ev.IP != "0.0.0.0" && ev.IP != "::" {
		t.sightings = append(t.sightings, Sighting{
			Offender: Offender{Scope: event.ScopeIP, Subject: rules.IPSubjectOf(ev.IP, e.det.IPv6Prefix)},
			EventID:  ev.EventID, TS: at, Endpoint: ev.Endpoint, Violation: violation,
		})
		t.events = append(t.events, ev)
	}
	if ev.UserID != "" {
		t.sightings = append(t.sightings, Sighting{
			Offender: Offender{Scope: event.ScopeUser, Subject: e.userKey(ev.UserID)},
			EventID:  ev.EventID, TS: at, Endpoint: ev.Endpoint, Violation: violation,
		})
		t.events = append(t.events, ev)
	}
}

func (t *windowTally) record(ctx context.Context) error {
	if len(t.sightings) == 0 {
		return nil
	}
	tallies, err := t.e.w.Record(ctx, t.e.spec, t.sightings)
	if err != nil {
		return fmt.Errorf("record sightings: %w", err)
	}
	if len(tallies) != len(t.sightings) {
		return fmt.Errorf("record sightings: %d tallies for %d sightings", len(tallies), len(t.sightings))
	}
	t.tallies = tallies
	return nil
}

func (t *windowTally) claims(_ *Stats, now time.Time, claim func(Claim) error) error {
	for i := range t.tallies {
		for _, c := range t.e.claims(&t.sightings[i], t.events[i], &t.tallies[i], now) {
			if err := claim(c); err != nil {
				return err
			}
		}
	}
	return nil
}
