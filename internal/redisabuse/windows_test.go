package redisabuse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testSpec: windows 5 min and 1 h, scan 10 s tracking at most 4 endpoints,
// 3 samples, 30 s grace.
var testSpec = abuse.WindowSpec{
	Violations:    []time.Duration{5 * time.Minute, time.Hour},
	Scan:          10 * time.Second,
	ScanCap:       4,
	MaxViolations: 1000,
	Samples:       3,
	Grace:         30 * time.Second,
}

// sight is a sighting of ip 203.0.113.7 at t0 + at.
func sight(id string, at time.Duration, endpoint string, violation bool) abuse.Sighting {
	return abuse.Sighting{
		Offender: abuse.Offender{Scope: "ip", Subject: "203.0.113.7"},
		EventID:  id, TS: detectT0.Add(at), Endpoint: endpoint, Violation: violation,
	}
}

// summary is a Tally with times as offsets from t0 (-1: zero time), so
// scenario tables stay readable.
type summary struct {
	Newest, Last        time.Duration
	Counts              []int64
	Firsts              []time.Duration
	Endpoints           int64
	FirstEndp, LastEndp time.Duration
	Samples             []string
}

func offset(t time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(detectT0)
}

func summarize(t abuse.Tally) summary {
	s := summary{Newest: offset(t.Newest), Last: offset(t.LastViolation), Counts: t.Violations,
		Endpoints: t.Endpoints, FirstEndp: offset(t.FirstEndpoint), LastEndp: offset(t.LastEndpoint),
		Samples: t.SampleEndpoints}
	for _, f := range t.FirstViolation {
		s.Firsts = append(s.Firsts, offset(f))
	}
	return s
}

func newTestWindows(tb testing.TB) (*Windows, *redis.Client, string) {
	tb.Helper()
	client := redistest.Client(tb)
	prefix := redistest.Prefix(tb, client)
	return NewWindows(client, prefix), client, prefix
}

func record(tb testing.TB, w *Windows, spec abuse.WindowSpec, sightings ...abuse.Sighting) []abuse.Tally {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tallies, err := w.Record(ctx, spec, sightings)
	if err != nil {
		tb.Fatalf("record: %v", err)
	}
	if len(tallies) != len(sightings) {
		tb.Fatalf("record: %d tallies for %d sightings", len(tallies), len(sightings))
	}
	return tallies
}

func TestWindowsScenarios(t *testing.T) {
	const s, m = time.Second, time.Minute
	capped := testSpec
	capped.MaxViolations = 3
	tests := []struct {
		name      string
		spec      abuse.WindowSpec
		sightings []abuse.Sighting
		want      summary // the tally of the last sighting
	}{
		{
			name: "violations across windows",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", true), sight("e2", 10*m, "/a", true),
				sight("e3", 50*m, "/a", true), sight("e4", 55*m, "/a", true),
			},
			want: summary{Newest: 55 * m, Last: 55 * m, Counts: []int64{2, 4}, Firsts: []time.Duration{50 * m, 0},
				Endpoints: 1, FirstEndp: 55 * m, LastEndp: 55 * m, Samples: []string{"/a"}},
		},
		{
			name: "window bounds are inclusive",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", true), sight("e2", 5*m, "/b", true),
			},
			want: summary{Newest: 5 * m, Last: 5 * m, Counts: []int64{2, 2}, Firsts: []time.Duration{0, 0},
				Endpoints: 1, FirstEndp: 5 * m, LastEndp: 5 * m, Samples: []string{"/b"}},
		},
		{
			name: "allowed decisions count endpoints only",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", false), sight("e2", 1*s, "/b", false), sight("e3", 2*s, "/c", true),
			},
			want: summary{Newest: 2 * s, Last: 2 * s, Counts: []int64{1, 1}, Firsts: []time.Duration{2 * s, 2 * s},
				Endpoints: 3, FirstEndp: 0, LastEndp: 2 * s, Samples: []string{"/c", "/b", "/a"}},
		},
		{
			name:      "no violation at all",
			sightings: []abuse.Sighting{sight("e1", 0, "/a", false)},
			want: summary{Newest: 0, Last: -1,
				Endpoints: 1, FirstEndp: 0, LastEndp: 0, Samples: []string{"/a"}},
		},
		{
			name: "out of order counts within the windows",
			sightings: []abuse.Sighting{
				sight("e1", 20*s, "/a", true), sight("e2", 5*s, "/b", true),
			},
			want: summary{Newest: 20 * s, Last: 20 * s, Counts: []int64{2, 2}, Firsts: []time.Duration{5 * s, 5 * s},
				Endpoints: 1, FirstEndp: 20 * s, LastEndp: 20 * s, Samples: []string{"/a"}},
		},
		{
			// The engine drops events later than the grace, per partition.
			name: "later than grace still counts in the windows",
			sightings: []abuse.Sighting{
				sight("e1", 40*s, "/a", true), sight("e2", 5*s, "/b", true),
			},
			want: summary{Newest: 40 * s, Last: 40 * s, Counts: []int64{2, 2}, Firsts: []time.Duration{5 * s, 5 * s},
				Endpoints: 1, FirstEndp: 40 * s, LastEndp: 40 * s, Samples: []string{"/a"}},
		},
		{
			name: "old violations leave the windows",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", true), sight("e2", 30*m, "/a", true), sight("e3", 2*time.Hour, "/b", true),
			},
			want: summary{Newest: 2 * time.Hour, Last: 2 * time.Hour, Counts: []int64{1, 1}, Firsts: []time.Duration{2 * time.Hour, 2 * time.Hour},
				Endpoints: 1, FirstEndp: 2 * time.Hour, LastEndp: 2 * time.Hour, Samples: []string{"/b"}},
		},
		{
			name: "redelivered event counts once",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", true), sight("e1", 0, "/a", true), sight("e2", 1*s, "/a", true), sight("e1", 0, "/a", true),
			},
			want: summary{Newest: 1 * s, Last: 1 * s, Counts: []int64{2, 2}, Firsts: []time.Duration{0, 0},
				Endpoints: 1, FirstEndp: 1 * s, LastEndp: 1 * s, Samples: []string{"/a"}},
		},
		{
			name: "scan cap bounds endpoints",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", false), sight("e2", 1*s, "/b", false), sight("e3", 2*s, "/c", false),
				sight("e4", 3*s, "/d", false), sight("e5", 4*s, "/e", false), sight("e6", 5*s, "/f", false),
				sight("e7", 6*s, "/a", false), // tracked: moves forward
			},
			want: summary{Newest: 6 * s, Last: -1,
				Endpoints: 4, FirstEndp: 1 * s, LastEndp: 6 * s, Samples: []string{"/a", "/d", "/c"}},
		},
		{
			name: "stale endpoints do not hold the scan cap",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", false), sight("e2", 1*s, "/b", false), sight("e3", 2*s, "/c", false),
				sight("e4", 3*s, "/d", false), sight("e5", 20*s, "/z", false),
			},
			want: summary{Newest: 20 * s, Last: -1,
				Endpoints: 1, FirstEndp: 20 * s, LastEndp: 20 * s, Samples: []string{"/z"}},
		},
		{
			name: "max violations keeps the newest",
			spec: capped,
			sightings: []abuse.Sighting{
				sight("e1", 0, "/a", true), sight("e2", 1*s, "/a", true), sight("e3", 2*s, "/a", true),
				sight("e4", 3*s, "/a", true), sight("e5", 4*s, "/a", true),
			},
			want: summary{Newest: 4 * s, Last: 4 * s, Counts: []int64{3, 3}, Firsts: []time.Duration{2 * s, 2 * s},
				Endpoints: 1, FirstEndp: 4 * s, LastEndp: 4 * s, Samples: []string{"/a"}},
		},
		{
			name: "sample ties by name",
			sightings: []abuse.Sighting{
				sight("e1", 0, "/c", false), sight("e2", 0, "/a", false), sight("e3", 0, "/b", false),
				sight("e4", 1*s, "/z", false),
			},
			want: summary{Newest: 1 * s, Last: -1,
				Endpoints: 4, FirstEndp: 0, LastEndp: 1 * s, Samples: []string{"/z", "/a", "/b"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if spec.Violations == nil {
				spec = testSpec
			}
			w, client, prefix := newTestWindows(t)
			tallies := record(t, w, spec, tt.sightings...)
			if got := summarize(tallies[len(tallies)-1]); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("last tally\n got %+v\nwant %+v", got, tt.want)
			}
			// One by one gives the same tallies as the pipelined batch.
			w2 := NewWindows(client, prefix+"seq:")
			for i, s := range tt.sightings {
				if got := record(t, w2, spec, s)[0]; !reflect.DeepEqual(got, tallies[i]) {
					t.Errorf("sighting %d alone: %+v, in batch: %+v", i, summarize(got), summarize(tallies[i]))
				}
			}
			if n := redistest.RequireExpiry(t, client, prefix); n == 0 {
				t.Errorf("no key written under %s", prefix)
			}
		})
	}
}

// TestWindowsRedelivery: delivering a batch again changes no count, so
// every further delivery answers the same tallies.
func TestWindowsRedelivery(t *testing.T) {
	w, _, _ := newTestWindows(t)
	var batch []abuse.Sighting
	for i := range 30 {
		batch = append(batch, sight(fmt.Sprintf("e%d", i), time.Duration(i)*700*time.Millisecond,
			fmt.Sprintf("/p/%d", i%7), i%3 != 0))
	}
	first := record(t, w, testSpec, batch...)
	second := record(t, w, testSpec, batch...)
	third := record(t, w, testSpec, batch...)
	last := first[len(first)-1] // a violation
	for i := range batch {
		want := last
		if !batch[i].Violation {
			want.Violations, want.FirstViolation, want.LastViolation = nil, nil, time.Time{}
		}
		if !reflect.DeepEqual(second[i], want) {
			t.Errorf("redelivery, sighting %d: %+v, want the state after the first delivery %+v",
				i, summarize(second[i]), summarize(want))
		}
	}
	if !reflect.DeepEqual(second, third) {
		t.Errorf("third delivery differs from the second")
	}
}

// TestWindowsOffendersIndependent: scopes and subjects have keys of their own.
func TestWindowsOffendersIndependent(t *testing.T) {
	w, _, _ := newTestWindows(t)
	a := sight("e1", 0, "/a", true)
	b := a
	b.Offender.Scope = "user"
	c := a
	c.Offender.Subject = "203.0.113.8"
	for i, tally := range record(t, w, testSpec, a, b, c) {
		if tally.Violations[0] != 1 || tally.Endpoints != 1 {
			t.Errorf("sighting %d: %+v, want its own count of 1", i, summarize(tally))
		}
	}
}

// hashTag is the part of a key Redis Cluster hashes.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// TestWindowsHostileSubject: a subject with braces and 10 KB keeps its keys
// short and in one slot.
func TestWindowsHostileSubject(t *testing.T) {
	w, client, prefix := newTestWindows(t)
	s := sight("e1", 0, "/{x}", true)
	s.Offender.Subject = "}{" + strings.Repeat("{a|b}", 2000) + "\x00\n"
	tally := record(t, w, testSpec, s)[0]
	if tally.Violations[0] != 1 || tally.SampleEndpoints[0] != "/{x}" {
		t.Errorf("tally %+v", summarize(tally))
	}
	keys := redistest.Keys(t, client, prefix)
	if len(keys) != 3 {
		t.Fatalf("keys %q, want 3", keys)
	}
	tag := hashTag(keys[0])
	if !strings.HasPrefix(tag, "det|ip|") || len(tag) != len("det|ip|")+32 {
		t.Errorf("hash tag %q, want det|ip|<32 hex>", tag)
	}
	for _, k := range keys {
		if hashTag(k) != tag || len(k) > 100 {
			t.Errorf("key %q: tag %q, want %q", k, hashTag(k), tag)
		}
	}
}

// TestWindowsNoScript: a server that lost its scripts runs them with EVAL.
func TestWindowsNoScript(t *testing.T) {
	client := redistest.PrivateClient(t)
	ctx := context.Background()
	w := NewWindows(client, "rw:")
	for range 2 {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		tallies := record(t, w, testSpec, sight("e1", 0, "/a", true), sight("e2", time.Second, "/b", true))
		if got := tallies[1].Violations; !reflect.DeepEqual(got, []int64{2, 2}) {
			t.Errorf("violations %v, want [2 2]", got)
		}
		if got := record(t, w, testSpec, sight("e3", 2*time.Second, "/c", false))[0].Endpoints; got != 3 {
			t.Errorf("endpoints %d, want 3", got)
		}
		client.FlushAll(ctx)
	}
}

func TestWindowsInvalid(t *testing.T) {
	w, _, _ := newTestWindows(t)
	bad := sight("e1", 0, "/a", true)
	bad.Offender.Scope = "}{"
	if _, err := w.Record(context.Background(), testSpec, []abuse.Sighting{bad}); err == nil {
		t.Error("unknown scope accepted")
	}
	spec := testSpec
	spec.Violations = []time.Duration{0}
	if _, err := w.Record(context.Background(), spec, []abuse.Sighting{sight("e1", 0, "/a", true)}); err == nil {
		t.Error("zero window accepted")
	}
	if got, err := w.Record(context.Background(), testSpec, nil); got != nil || err != nil {
		t.Errorf("no sightings: %v, %v", got, err)
	}
}

// TestWindowsShared runs the scenario table shared with abusetest.MemoryWindows.
func TestWindowsShared(t *testing.T) {
	abusetest.RunWindows(t, func(t *testing.T) abuse.Windows {
		w, _, _ := newTestWindows(t)
		return w
	})
}

// TestWindowsDifferential records random batches (out of order, late,
// redelivered, tied, jumping past every window, between unbans) on Redis and on
// abusetest.MemoryWindows, the reference, and compares every tally; odd seeds
// ask for evidence only from thresholds.
func TestWindowsDifferential(t *testing.T) {
	offenders := []abuse.Offender{{Scope: "ip", Subject: "a"}, {Scope: "ip", Subject: "b"}, {Scope: "user", Subject: "a"}}
	for seed := range uint64(6) {
		spec := abuse.WindowSpec{
			Violations: []time.Duration{2 * time.Second, 10 * time.Second},
			Scan:       3 * time.Second, ScanCap: 5, MaxViolations: 8, Samples: 4, Grace: time.Second,
		}
		if seed%2 == 1 {
			spec.ScanThreshold, spec.ViolationThresholds = 4, []int64{3, 6}
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w, _, _ := newTestWindows(t)
			windowsDifferential(t, w, spec, offenders, rand.New(rand.NewPCG(seed, 7)), 60, 20)
		})
	}
}

// windowsDifferential records batches random sightings of offenders (1 to
// maxBatch each: out of order, late, redelivered, tied, jumping past every
// window) on w and on abusetest.MemoryWindows, the reference, and requires the
// same tallies.
func windowsDifferential(t *testing.T, w *Windows, spec abuse.WindowSpec, offenders []abuse.Offender, rng *rand.Rand, batches, maxBatch int) {
	t.Helper()
	mem := abusetest.NewMemoryWindows()
	at := time.Duration(0)
	var seen []abuse.Sighting
	for batch := range batches {
		if rng.IntN(10) == 0 { // an unban: nothing up to about now counts again
			o, lift := offenders[rng.IntN(len(offenders))], detectT0.Add(at-time.Duration(rng.IntN(2000))*time.Millisecond)
			if err := Lift(context.Background(), w.client, w.prefix, o.Scope, o.Subject, lift); err != nil {
				t.Fatal(err)
			}
			mem.Lift(o, lift)
		}
		var sightings []abuse.Sighting
		for range 1 + rng.IntN(maxBatch) {
			if len(seen) > 0 && rng.IntN(8) == 0 { // redelivery
				sightings = append(sightings, seen[rng.IntN(len(seen))])
				continue
			}
			switch r := rng.IntN(20); {
			case r == 0:
				at += 15 * time.Second
			case r < 3:
				at -= time.Duration(rng.IntN(3000)) * time.Millisecond
			case r < 6: // same ms: ties
			default:
				at += time.Duration(rng.IntN(400)) * time.Millisecond
			}
			s := abuse.Sighting{
				Offender: offenders[rng.IntN(len(offenders))], EventID: fmt.Sprintf("e%d", len(seen)),
				TS: detectT0.Add(at), Endpoint: fmt.Sprintf("/p/%d", rng.IntN(10)), Violation: rng.IntN(3) > 0,
			}
			seen = append(seen, s)
			sightings = append(sightings, s)
		}
		got := record(t, w, spec, sightings...)
		want, err := mem.Record(context.Background(), spec, sightings)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("batch %d sighting %d %+v:\n redis %+v\nmemory %+v",
					batch, i, sightings[i], summarize(got[i]), summarize(want[i]))
			}
		}
	}
}
