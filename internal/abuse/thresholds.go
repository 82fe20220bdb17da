package abuse

import (
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/event"
)

// ReasonScan is the reason of a ban for requests to too many distinct
// endpoints; violation bans and warnings carry ViolationReason of their
// window.
const ReasonScan = "scan"

// banReasons returns the reasons the engine's bans can carry: scan when a
// scan threshold is configured and one per ban level's window, in
// configuration order, so that metrics labelled by reason start each at 0.
func (e *engine) banReasons() []string {
	var out []string
	if e.det.Scan != nil {
		out = append(out, ReasonScan)
	}
	for _, b := range e.det.Ban {
		if r := ViolationReason(b.Within.Std()); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// warnReasons returns the reasons the engine's warnings can carry: the
// warning window's, when one is configured.
func (e *engine) warnReasons() []string {
	if e.det.Warn == nil {
		return nil
	}
	return []string{ViolationReason(e.det.Warn.Within.Std())}
}

// MaxSampleBytes bounds each endpoint a ban or warning carries as evidence,
// in bytes. Endpoints may be 8 KiB (event.MaxEndpoint) and a ban carries up
// to 50 of them (detection.samples), which with the JSON escaping of '<',
// '>' and '&' (6 bytes each) could reach 2.4 MB, over what Kafka and
// kafka-go accept in one message (1 MiB by default): the ban could never be
// published. Cut to this, a ban message stays under 100 KB.
const MaxSampleBytes = 256

// sampleCut marks a sample endpoint that was cut to MaxSampleBytes.
const sampleCut = "…"

// clipSamples returns samples with each cut to at most MaxSampleBytes, on a
// UTF-8 boundary and ending in sampleCut when cut; a new slice either way.
func clipSamples(samples []string) []string {
	if samples == nil {
		return nil
	}
	out := make([]string, len(samples))
	for i, s := range samples {
		if len(s) > MaxSampleBytes {
			n := MaxSampleBytes - len(sampleCut)
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			s = s[:n] + sampleCut
		}
		out[i] = s
	}
	return out
}

// candidate is a ban one tally qualifies for.
type candidate struct {
	reason    string
	count     int64
	threshold int64
	window    time.Duration
	duration  time.Duration
	first     time.Time // evidence start
	last      time.Time
}

// claims returns what one sighting's tally triggers: at most one ban (the
// qualifying rule with the longest base duration; ties go to scan, then to
// the ban levels in configuration order) and at most one warning. A tally
// without violation counts (not a violation sighting, which cannot raise
// one) is only checked against the scan threshold. Evidence (endpoint
// bounds, samples) is read only from a threshold on: Spec asks Windows for
// no more. now is the detector's clock, the latest time a claim is made at.
func (e *engine) claims(s *Sighting, ev *event.Decision, t *Tally, now time.Time) []Claim {
	var best *candidate
	if sc := e.det.Scan; sc != nil && t.Endpoints >= sc.DistinctEndpoints {
		best = &candidate{
			reason: ReasonScan, count: t.Endpoints, threshold: sc.DistinctEndpoints,
			window: sc.Within.Std(), duration: sc.Duration.Std(),
			first: t.FirstEndpoint, last: t.LastEndpoint,
		}
	}
	counted := t.Violations != nil
	for _, b := range e.det.Ban {
		i := e.windowOf[b.Within.Std()]
		if !counted || t.Violations[i] < b.Violations || (best != nil && b.Duration.Std() <= best.duration) {
			continue
		}
		best = &candidate{
			reason: ViolationReason(b.Within.Std()), count: t.Violations[i], threshold: b.Violations,
			window: b.Within.Std(), duration: b.Duration.Std(),
			first: t.FirstViolation[i], last: t.LastViolation,
		}
	}
	var out []Claim
	if best != nil {
		out = append(out, Claim{
			Ban:        e.ban(s, ev, t, event.ActionBan, best, now),
			Escalation: Escalation{Factor: e.det.Escalation.Factor, Cap: e.det.Escalation.Cap.Std(), Period: e.det.Escalation.Period.Std()},
		})
	}
	if w := e.det.Warn; w != nil && counted {
		i := e.windowOf[w.Within.Std()]
		if t.Violations[i] >= w.Violations {
			out = append(out, Claim{
				Ban: e.ban(s, ev, t, event.ActionWarn, &candidate{
					reason: ViolationReason(w.Within.Std()), count: t.Violations[i], threshold: w.Violations,
					window: w.Within.Std(), first: t.FirstViolation[i], last: t.LastViolation,
				}, now),
				WarnFor: w.Within.Std(),
			})
		}
	}
	return out
}

// ban returns the ban or warning of one candidate. It is issued at the
// sighting's time, but never later than now: the ledger derives its expiry
// from it, and an event stamped ahead of the detector's clock (within the
// tolerated skew) must not make a ban outlast its duration.
func (e *engine) ban(s *Sighting, ev *event.Decision, t *Tally, action string, c *candidate, now time.Time) event.Ban {
	idReason := c.reason
	if action == event.ActionWarn {
		idReason = event.ActionWarn + "/" + c.reason
	}
	ts := s.TS
	if ts.After(now) {
		ts = now
	}
	return event.Ban{
		BanID:     BanID(s.Offender.Scope, s.Offender.Subject, idReason, ev.EventID),
		TS:        ts,
		Action:    action,
		Scope:     s.Offender.Scope,
		Subject:   s.Offender.Subject,
		Reason:    c.reason,
		Count:     c.count,
		Threshold: c.threshold,
		WindowS:   ceilSeconds(c.window),
		DurationS: ceilSeconds(c.duration),
		Source:    SourceDetector,
		DryRun:    e.det.DryRun,
		Evidence: event.Evidence{
			FirstTS: c.first, LastTS: c.last, SampleEndpoints: clipSamples(t.SampleEndpoints),
		},
	}
}
