// Package abusetest holds the in-memory references of abuse.Windows,
// abuse.Distinct and abuse.Ledger (MemoryWindows, MemoryDistinct,
// MemoryLedger: the state of the replay tests) and the scenario tables
// shared by their tests and those of the Redis implementations
// (internal/redisabuse), so both are held to the same expected results.
// Like every package under internal/testkit, it is for tests only.
package abusetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
)

// T0 is the time scenarios count from: the start of the current second.
// The scenarios also run on Redis, where a ledger settles bans into a
// blacklist that expires on the wall clock, so T0 follows the calendar
// rather than naming a date that will pass.
var T0 = time.Now().UTC().Truncate(time.Second)

// At is T0 plus ms milliseconds.
func At(ms int64) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }

// WindowsStep records Sightings in one Record call and expects Want.
type WindowsStep struct {
	Sightings []abuse.Sighting
	Want      []abuse.Tally
}

// WindowsScenario is a sequence of Record calls on fresh Windows.
type WindowsScenario struct {
	Name  string
	Spec  abuse.WindowSpec
	Steps []WindowsStep
}

// Spec is the spec of most scenarios: violation windows of 5s and 60s,
// a 10s scan window tracking at most 4 endpoints, at most 5 violations,
// 3 samples, 2s grace.
var Spec = abuse.WindowSpec{
	Violations: []time.Duration{5 * time.Second, time.Minute},
	Scan:       10 * time.Second, ScanCap: 4, MaxViolations: 5, Samples: 3, Grace: 2 * time.Second,
}

// ThresholdSpec is Spec with evidence only from 3 endpoints, 2 violations
// in the 5s window or 4 in the 60s one.
var ThresholdSpec = func() abuse.WindowSpec {
	s := Spec
	s.ScanThreshold, s.ViolationThresholds = 3, []int64{2, 4}
	return s
}()

var ip = abuse.Offender{Scope: "ip", Subject: "203.0.113.7"}

// V is a violation of the ip offender; S a sighting that is not one.
func V(id string, ms int64, endpoint string) abuse.Sighting {
	return abuse.Sighting{Offender: ip, EventID: id, TS: At(ms), Endpoint: endpoint, Violation: true}
}

// S is a sighting of the ip offender that is not a violation.
func S(id string, ms int64, endpoint string) abuse.Sighting {
	return abuse.Sighting{Offender: ip, EventID: id, TS: At(ms), Endpoint: endpoint}
}

// Want builds a tally under Spec: newest, the violation counts and firsts
// (ms, -1 for none) of the 5s and 60s windows, the last violation (-1: none),
// the endpoint count, first and last (-1: none), the samples.
func Want(newest int64, v5, first5, v60, first60, last int64, eps, firstEp, lastEp int64, samples ...string) abuse.Tally {
	return abuse.Tally{
		Newest:          At(newest),
		Violations:      []int64{v5, v60},
		FirstViolation:  []time.Time{opt(first5), opt(first60)},
		LastViolation:   opt(last),
		Endpoints:       eps,
		FirstEndpoint:   opt(firstEp),
		LastEndpoint:    opt(lastEp),
		SampleEndpoints: samples,
	}
}

// WantS builds the tally of a sighting that is not a violation under Spec:
// no violation tallies, then as Want.
func WantS(newest int64, eps, firstEp, lastEp int64, samples ...string) abuse.Tally {
	t := Want(newest, 0, -1, 0, -1, -1, eps, firstEp, lastEp, samples...)
	t.Violations, t.FirstViolation = nil, nil
	return t
}

func opt(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return At(ms)
}

func step(s abuse.Sighting, want abuse.Tally) WindowsStep {
	return WindowsStep{Sightings: []abuse.Sighting{s}, Want: []abuse.Tally{want}}
}

// WindowsScenarios returns the Windows scenarios.
func WindowsScenarios() []WindowsScenario {
	return []WindowsScenario{
		{Name: "counts, firsts and samples", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a")),
			step(V("b", 1000, "/b"), Want(1000, 2, 0, 2, 0, 1000, 2, 0, 1000, "/b", "/a")),
			step(S("c", 2000, "/a"), WantS(2000, 2, 1000, 2000, "/a", "/b")),
			step(V("d", 2500, "/c"), Want(2500, 3, 0, 3, 0, 2500, 3, 1000, 2500, "/c", "/a", "/b")),
		}},
		{Name: "sub-millisecond times are truncated", Spec: Spec, Steps: []WindowsStep{
			step(abuse.Sighting{Offender: ip, EventID: "a", TS: At(7).Add(999 * time.Microsecond), Endpoint: "/a", Violation: true},
				Want(7, 1, 7, 1, 7, 7, 1, 7, 7, "/a")),
		}},
		{Name: "redelivery changes nothing", Spec: Spec, Steps: []WindowsStep{
			{Sightings: []abuse.Sighting{V("a", 0, "/a"), V("a", 0, "/a"), V("b", 500, "/b"), V("a", 0, "/a")}, Want: []abuse.Tally{
				Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a"),
				Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a"),
				Want(500, 2, 0, 2, 0, 500, 2, 0, 500, "/b", "/a"),
				Want(500, 2, 0, 2, 0, 500, 2, 0, 500, "/b", "/a"),
			}},
			step(V("b", 500, "/b"), Want(500, 2, 0, 2, 0, 500, 2, 0, 500, "/b", "/a")),
		}},
		{Name: "first time of an event id wins", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a")),
			step(V("a", 6000, "/a"), Want(6000, 0, -1, 1, 0, 0, 1, 6000, 6000, "/a")),
		}},
		{Name: "windows slide on the newest time, bounds inclusive", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a")),
			step(V("b", 5000, "/a"), Want(5000, 2, 0, 2, 0, 5000, 1, 5000, 5000, "/a")),
			step(V("c", 5001, "/a"), Want(5001, 2, 5000, 3, 0, 5001, 1, 5001, 5001, "/a")),
			step(S("d", 60000, "/b"), WantS(60000, 1, 60000, 60000, "/b")),
			step(V("e", 60000, "/b"), Want(60000, 1, 60000, 4, 0, 60000, 1, 60000, 60000, "/b")),
			step(V("f", 60001, "/b"), Want(60001, 2, 60000, 4, 5000, 60001, 1, 60001, 60001, "/b")),
		}},
		{Name: "late sightings count when inside the window", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 10000, "/a"), Want(10000, 1, 10000, 1, 10000, 10000, 1, 10000, 10000, "/a")),
			step(V("b", 8000, "/b"), Want(10000, 2, 8000, 2, 8000, 10000, 2, 8000, 10000, "/a", "/b")),
			step(V("c", 4000, "/c"), Want(10000, 2, 8000, 3, 4000, 10000, 3, 4000, 10000, "/a", "/b", "/c")),
			// Older than the scan window: the endpoint is not tracked.
			step(S("d", -1, "/d"), WantS(10000, 3, 4000, 10000, "/a", "/b", "/c")),
		}},
		{Name: "endpoint cap", Spec: Spec, Steps: []WindowsStep{
			step(S("1", 0, "/1"), WantS(0, 1, 0, 0, "/1")),
			step(S("2", 1000, "/2"), WantS(1000, 2, 0, 1000, "/2", "/1")),
			step(S("3", 2000, "/3"), WantS(2000, 3, 0, 2000, "/3", "/2", "/1")),
			step(S("4", 3000, "/4"), WantS(3000, 4, 0, 3000, "/4", "/3", "/2")),
			step(S("5", 4000, "/5"), WantS(4000, 4, 0, 3000, "/4", "/3", "/2")),
			// A tracked endpoint is still refreshed at the cap.
			step(S("6", 4500, "/1"), WantS(4500, 4, 1000, 4500, "/1", "/4", "/3")),
			// Endpoints out of the scan window make room first.
			step(S("7", 11500, "/7"), WantS(11500, 4, 2000, 11500, "/7", "/1", "/4")),
		}},
		{Name: "stale endpoints do not hide a new scan", Spec: Spec, Steps: []WindowsStep{
			{Sightings: []abuse.Sighting{S("1", 0, "/1"), S("2", 1000, "/2"), S("3", 2000, "/3"), S("4", 3000, "/4")}, Want: []abuse.Tally{
				WantS(0, 1, 0, 0, "/1"),
				WantS(1000, 2, 0, 1000, "/2", "/1"),
				WantS(2000, 3, 0, 2000, "/3", "/2", "/1"),
				WantS(3000, 4, 0, 3000, "/4", "/3", "/2"),
			}},
			step(S("x", 11000, "/x"), WantS(11000, 4, 1000, 11000, "/x", "/4", "/3")),
		}},
		{Name: "samples: newest first, ties by name", Spec: Spec, Steps: []WindowsStep{
			{Sightings: []abuse.Sighting{S("1", 0, "/z"), S("2", 0, "/b"), S("3", 0, "/c"), S("4", 0, "/a")}, Want: []abuse.Tally{
				WantS(0, 1, 0, 0, "/z"),
				WantS(0, 2, 0, 0, "/b", "/z"),
				WantS(0, 3, 0, 0, "/b", "/c", "/z"),
				WantS(0, 4, 0, 0, "/a", "/b", "/c"),
			}},
		}},
		{Name: "at most MaxViolations, the newest kept", Spec: Spec, Steps: []WindowsStep{
			{Sightings: []abuse.Sighting{V("a", 0, "/"), V("b", 1000, "/"), V("c", 2000, "/"), V("d", 3000, "/"), V("e", 4000, "/"), V("f", 5000, "/"), V("g", 6000, "/")}, Want: []abuse.Tally{
				Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/"),
				Want(1000, 2, 0, 2, 0, 1000, 1, 1000, 1000, "/"),
				Want(2000, 3, 0, 3, 0, 2000, 1, 2000, 2000, "/"),
				Want(3000, 4, 0, 4, 0, 3000, 1, 3000, 3000, "/"),
				Want(4000, 5, 0, 5, 0, 4000, 1, 4000, 4000, "/"),
				Want(5000, 5, 1000, 5, 1000, 5000, 1, 5000, 5000, "/"),
				Want(6000, 5, 2000, 5, 2000, 6000, 1, 6000, 6000, "/"),
			}},
			// An older violation is dropped at once: the newest are kept.
			step(V("h", 500, "/"), Want(6000, 5, 2000, 5, 2000, 6000, 1, 6000, 6000, "/")),
			// Ties on time are dropped by event id.
			{Sightings: []abuse.Sighting{V("z", 6000, "/"), V("y", 6000, "/"), V("x", 6000, "/"), V("w", 6000, "/")}, Want: []abuse.Tally{
				Want(6000, 5, 3000, 5, 3000, 6000, 1, 6000, 6000, "/"),
				Want(6000, 5, 4000, 5, 4000, 6000, 1, 6000, 6000, "/"),
				Want(6000, 5, 5000, 5, 5000, 6000, 1, 6000, 6000, "/"),
				Want(6000, 5, 6000, 5, 6000, 6000, 1, 6000, 6000, "/"),
			}},
			// g, w, x, y, z are kept; a, redelivered, is the first dropped.
			step(V("a", 6000, "/"), Want(6000, 5, 6000, 5, 6000, 6000, 1, 6000, 6000, "/")),
		}},
		{Name: "state past the longest window plus grace is dropped", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a")),
			step(S("b", 62000, "/b"), WantS(62000, 1, 62000, 62000, "/b")),
			step(S("c", 62001, "/b"), WantS(62001, 1, 62001, 62001, "/b")),
			step(V("d", 0, "/d"), Want(62001, 0, -1, 0, -1, -1, 1, 62001, 62001, "/b")),
		}},
		{Name: "offenders are independent", Spec: Spec, Steps: []WindowsStep{
			{Sightings: []abuse.Sighting{
				V("a", 0, "/a"),
				{Offender: abuse.Offender{Scope: "user", Subject: "203.0.113.7"}, EventID: "a", TS: At(0), Endpoint: "/a", Violation: true},
				{Offender: abuse.Offender{Scope: "ip", Subject: "203.0.113.8"}, EventID: "b", TS: At(9000), Endpoint: "/b"},
				V("c", 1000, "/c"),
			}, Want: []abuse.Tally{
				Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a"),
				Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a"),
				WantS(9000, 1, 9000, 9000, "/b"),
				Want(1000, 2, 0, 2, 0, 1000, 2, 0, 1000, "/c", "/a"),
			}},
		}},
		{Name: "no violation windows, no scan", Spec: abuse.WindowSpec{Samples: 2, Grace: time.Second}, Steps: []WindowsStep{
			step(V("a", 0, "/a"), abuse.Tally{Newest: At(0), Violations: []int64{}, FirstViolation: []time.Time{}}),
			step(S("b", 1, "/a"), abuse.Tally{Newest: At(1)}),
		}},
		// Only a violation can raise a count, so only a violation sighting
		// is tallied; the others still record (and trim) as usual.
		{Name: "a sighting that is not a violation has no violation tallies", Spec: Spec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, 0, 0, "/a")),
			step(S("b", 1000, "/a"), WantS(1000, 1, 1000, 1000, "/a")),
			{Sightings: []abuse.Sighting{S("c", 7000, "/b"), V("d", 7000, "/b"), S("d", 7000, "/b")}, Want: []abuse.Tally{
				WantS(7000, 2, 1000, 7000, "/b", "/a"),
				Want(7000, 1, 7000, 2, 0, 7000, 2, 1000, 7000, "/b", "/a"),
				WantS(7000, 2, 1000, 7000, "/b", "/a"),
			}},
		}},
		{Name: "evidence only from the thresholds", Spec: ThresholdSpec, Steps: []WindowsStep{
			step(V("a", 0, "/a"), Want(0, 1, 0, 1, 0, 0, 1, -1, -1)),
			// 2 in the 5s window: samples, but no endpoint bounds (1 < 3).
			step(V("b", 1000, "/a"), Want(1000, 2, 0, 2, 0, 1000, 1, -1, -1, "/a")),
			step(S("c", 7000, "/a"), WantS(7000, 1, -1, -1)),
			step(V("d", 8000, "/a"), Want(8000, 1, 8000, 3, 0, 8000, 1, -1, -1)),
			// 4 in the 60s window.
			step(V("e", 20000, "/a"), Want(20000, 1, 20000, 4, 0, 20000, 1, -1, -1, "/a")),
			step(S("f", 20500, "/b"), WantS(20500, 2, -1, -1)),
			// 3 endpoints: bounds and samples.
			step(S("g", 21000, "/c"), WantS(21000, 3, 20000, 21000, "/c", "/b", "/a")),
			step(V("h", 21000, "/c"), Want(21000, 2, 20000, 5, 0, 21000, 3, 20000, 21000, "/c", "/b", "/a")),
		}},
	}
}

// RunWindows runs every Windows scenario on the Windows newWindows returns
// (fresh for each scenario).
func RunWindows(t *testing.T, newWindows func(t *testing.T) abuse.Windows) {
	for _, sc := range WindowsScenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			w := newWindows(t)
			for i, st := range sc.Steps {
				got, err := w.Record(context.Background(), sc.Spec, st.Sightings)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if len(got) != len(st.Want) {
					t.Fatalf("step %d: %d tallies, want %d", i, len(got), len(st.Want))
				}
				for j := range got {
					if !EqualTally(got[j], st.Want[j]) {
						t.Errorf("step %d, sighting %d (%s at %s):\n got %s\nwant %s", i, j,
							st.Sightings[j].EventID, st.Sightings[j].TS.Sub(T0), FormatTally(got[j]), FormatTally(st.Want[j]))
					}
				}
			}
		})
	}
}

// EqualTally compares tallies: times with Equal, nil and empty slices alike.
func EqualTally(a, b abuse.Tally) bool {
	eqTimes := func(x, y []time.Time) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !x[i].Equal(y[i]) {
				return false
			}
		}
		return true
	}
	eqStrings := func(x, y []string) bool { return len(x) == len(y) && (len(x) == 0 || reflect.DeepEqual(x, y)) }
	eqInts := func(x, y []int64) bool { return len(x) == len(y) && (len(x) == 0 || reflect.DeepEqual(x, y)) }
	return a.Newest.Equal(b.Newest) && eqInts(a.Violations, b.Violations) && eqTimes(a.FirstViolation, b.FirstViolation) &&
		a.LastViolation.Equal(b.LastViolation) && a.Endpoints == b.Endpoints &&
		a.FirstEndpoint.Equal(b.FirstEndpoint) && a.LastEndpoint.Equal(b.LastEndpoint) &&
		eqStrings(a.SampleEndpoints, b.SampleEndpoints)
}

// FormatTally writes t with times as offsets from T0, for test failures.
func FormatTally(t abuse.Tally) string {
	rel := func(x time.Time) string {
		if x.IsZero() {
			return "-"
		}
		return x.Sub(T0).String()
	}
	firsts := make([]string, len(t.FirstViolation))
	for i, f := range t.FirstViolation {
		firsts[i] = rel(f)
	}
	return fmt.Sprintf("newest=%s violations=%v first=%v last=%s endpoints=%d [%s, %s] samples=%q",
		rel(t.Newest), t.Violations, firsts, rel(t.LastViolation), t.Endpoints, rel(t.FirstEndpoint), rel(t.LastEndpoint), t.SampleEndpoints)
}
