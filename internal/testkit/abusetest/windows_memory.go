package abusetest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
)

// MemoryWindows is the in-memory Windows: the reference the Redis
// implementation is tested against, and the state of replay tests. It keeps
// every offender it has seen (their tallies shrink, their entries do not
// go away), so it suits tests and replays, not a long-running detector.
//
// Semantics, per offender, all times truncated to milliseconds:
//   - Newest is the largest sighting time seen.
//   - Endpoints map a name to its latest sighting time. On each sighting
//     the endpoints older than Newest-Scan are dropped first; then the
//     sighting's endpoint is refreshed (keeping the larger time) or, when
//     new, added only if its time is within [Newest-Scan, Newest] and fewer
//     than ScanCap endpoints are tracked. Dropping before the cap check
//     bounds the set by ScanCap and keeps stale endpoints from hiding a
//     scan that follows them.
//   - Violations map an event id to its time; the first time recorded for
//     an id wins. Those older than Newest-max(Violations)-Grace are
//     dropped, then the oldest (by time, then event id) beyond
//     MaxViolations.
//   - Nothing at or before the offender's lift (Lift) counts: a sighting at
//     or before it adds no endpoint and no violation and is tallied as a
//     sighting that is not a violation, and every sighting drops the
//     endpoints and violations at or before it.
//   - The tally leaves out what Tally says it may: violation tallies for a
//     sighting that is not a violation, endpoint bounds and samples below
//     the spec's thresholds.
type MemoryWindows struct {
	mu        sync.Mutex
	offenders map[abuse.Offender]*offenderWindows
}

type offenderWindows struct {
	newest     int64
	lifted     int64 // ms of the last lift; 0: none
	violations map[string]int64
	endpoints  map[string]int64
}

// NewMemoryWindows returns empty windows.
func NewMemoryWindows() *MemoryWindows {
	return &MemoryWindows{offenders: make(map[abuse.Offender]*offenderWindows)}
}

// Record records the sightings in order and returns the tally of each,
// taken right after recording it.
func (w *MemoryWindows) Record(ctx context.Context, spec abuse.WindowSpec, sightings []abuse.Sighting) ([]abuse.Tally, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tallies := make([]abuse.Tally, len(sightings))
	for i := range sightings {
		s := &sightings[i]
		o := w.offenders[s.Offender]
		ts := s.TS.UnixMilli()
		if o == nil {
			o = &offenderWindows{newest: ts, violations: map[string]int64{}, endpoints: map[string]int64{}}
			w.offenders[s.Offender] = o
		}
		violation := s.Violation && ts > o.lifted
		o.record(spec, s, ts, violation)
		tallies[i] = o.tally(spec, violation)
	}
	return tallies, nil
}

// Lift marks the lift of the offender's ban at at (what
// redisabuse.Lift does in Redis): nothing at or before it counts again.
func (w *MemoryWindows) Lift(o abuse.Offender, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ow := w.offenders[o]
	if ow == nil {
		ow = &offenderWindows{violations: map[string]int64{}, endpoints: map[string]int64{}}
		w.offenders[o] = ow
	}
	ow.lifted = at.UnixMilli()
}

func (o *offenderWindows) record(spec abuse.WindowSpec, s *abuse.Sighting, ts int64, violation bool) {
	o.newest = max(o.newest, ts)
	scanFrom := o.newest - spec.Scan.Milliseconds()
	for name, t := range o.endpoints {
		if t < scanFrom || t <= o.lifted {
			delete(o.endpoints, name)
		}
	}
	switch old, ok := o.endpoints[s.Endpoint]; {
	case ts <= o.lifted:
	case ok:
		o.endpoints[s.Endpoint] = max(old, ts)
	case ts >= scanFrom && int64(len(o.endpoints)) < spec.ScanCap:
		o.endpoints[s.Endpoint] = ts
	}

	if violation {
		if _, ok := o.violations[s.EventID]; !ok {
			o.violations[s.EventID] = ts
		}
	}
	var longest time.Duration
	for _, d := range spec.Violations {
		longest = max(longest, d)
	}
	keepFrom := o.newest - longest.Milliseconds() - spec.Grace.Milliseconds()
	for id, t := range o.violations {
		if t < keepFrom || t <= o.lifted {
			delete(o.violations, id)
		}
	}
	if excess := int64(len(o.violations)) - max(spec.MaxViolations, 0); excess > 0 {
		for _, v := range sortedEntries(o.violations)[:excess] {
			delete(o.violations, v.name)
		}
	}
}

func (o *offenderWindows) tally(spec abuse.WindowSpec, violation bool) abuse.Tally {
	t := abuse.Tally{Newest: msTime(o.newest)}
	if violation {
		o.tallyViolations(spec, &t)
	}

	// After record, every tracked endpoint is within [Newest-Scan, Newest].
	eps := sortedEntries(o.endpoints)
	t.Endpoints = int64(len(eps))
	if len(eps) > 0 && t.Endpoints >= spec.ScanThreshold {
		t.FirstEndpoint = msTime(eps[0].ts)
		t.LastEndpoint = msTime(eps[len(eps)-1].ts)
	}
	n := min(len(eps), max(spec.Samples, 0))
	if n > 0 && spec.NeedsSamples(&t) {
		slices.SortFunc(eps, func(a, b entry) int {
			return cmp.Or(cmp.Compare(b.ts, a.ts), cmp.Compare(a.name, b.name))
		})
		t.SampleEndpoints = make([]string, n)
		for i := range n {
			t.SampleEndpoints[i] = eps[i].name
		}
	}
	return t
}

func (o *offenderWindows) tallyViolations(spec abuse.WindowSpec, t *abuse.Tally) {
	t.Violations = make([]int64, len(spec.Violations))
	t.FirstViolation = make([]time.Time, len(spec.Violations))
	first := make([]int64, len(spec.Violations))
	var last int64
	seen := false
	for _, ts := range o.violations {
		if !seen || ts > last {
			last, seen = ts, true
		}
		for i, d := range spec.Violations {
			if ts >= o.newest-d.Milliseconds() {
				if t.Violations[i] == 0 || ts < first[i] {
					first[i] = ts
				}
				t.Violations[i]++
			}
		}
	}
	for i, n := range t.Violations {
		if n > 0 {
			t.FirstViolation[i] = msTime(first[i])
		}
	}
	if seen {
		t.LastViolation = msTime(last)
	}
}

type entry struct {
	name string
	ts   int64
}

// sortedEntries returns m's entries by time, then name, ascending (the
// order of a Redis sorted set scored by time).
func sortedEntries(m map[string]int64) []entry {
	out := make([]entry, 0, len(m))
	for name, ts := range m {
		out = append(out, entry{name, ts})
	}
	slices.SortFunc(out, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.name, b.name))
	})
	return out
}

// msTime is the UTC time of a Unix millisecond count.
func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
