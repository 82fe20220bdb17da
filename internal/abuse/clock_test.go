package abuse_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// clockEngine is an engine with memory state whose clock reads now, with
// the default detection settings but scan and warn thresholds small enough
// for a test.
func clockEngine(now time.Time, skew time.Duration) *abuse.Engine {
	det := rules.DefaultDetection()
	det.Scan = &rules.ScanPolicy{DistinctEndpoints: 5, Within: dur(10 * time.Second), Duration: dur(time.Hour)}
	det.MaxClockSkew = dur(skew)
	return abuse.NewEngine(abuse.Config{Detection: det, Now: func() time.Time { return now }},
		abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
}

// at is an allowed decision of ip for endpoint, stamped ts by instance.
func at(id string, ts time.Time, instance, ip, endpoint string) event.Decision {
	return event.Decision{EventID: id, TS: ts, Instance: instance, IP: ip, Endpoint: endpoint, Allowed: true, Reason: event.ReasonOK}
}

// The reported blinding: events a year ahead, on every partition, then a
// scanner on the detector's clock. The future events are counted, moved
// nothing, and the scanner is banned at the detector's time.
func TestFutureEventsDoNotBlindTheDetector(t *testing.T) {
	now := fixtureStart // the detector's clock, injected
	e := clockEngine(now, time.Minute)
	ctx := context.Background()
	yearAhead := now.AddDate(1, 0, 0)
	var future []abuse.Input
	for i := range 240 {
		ev := at(fmt.Sprintf("f%d", i), yearAhead.Add(time.Duration(i)*time.Millisecond), "limiter-fast", fmt.Sprintf("192.0.2.%d", i%200+1), "/api/x")
		future = append(future, abuse.Input{Partition: i % 12, Event: ev})
	}
	_, st, err := e.Process(ctx, future)
	if err != nil {
		t.Fatal(err)
	}
	if st.Future != 240 || st.Late != 0 {
		t.Fatalf("stats %+v, want 240 future events, none late", st)
	}
	if got := st.Ahead["limiter-fast"]; got < yearAhead.Sub(now) || len(st.Ahead) != 1 {
		t.Fatalf("ahead %v, want limiter-fast at least %v ahead", st.Ahead, yearAhead.Sub(now))
	}

	var scan []abuse.Input
	for i := range 5 {
		ts := now.Add(-2*time.Second + time.Duration(i)*100*time.Millisecond) // a little consumer delay
		scan = append(scan, abuse.Input{Partition: i % 12, Event: at(fmt.Sprintf("s%d", i), ts, "limiter-1", "203.0.113.66", fmt.Sprintf("/api/scan/%d", i))})
	}
	out, st, err := e.Process(ctx, scan)
	if err != nil {
		t.Fatal(err)
	}
	if st.Late != 0 || st.Future != 0 {
		t.Fatalf("scanner's events: stats %+v, want none late or future", st)
	}
	if len(out) != 1 || out[0].Ban.Subject != "203.0.113.66" || out[0].Ban.Reason != abuse.ReasonScan {
		t.Fatalf("outcomes %+v, want the scanner banned", out)
	}
	if b := out[0].Ban; b.TS.After(now) || b.ExpiresAt.After(now.Add(time.Hour)) {
		t.Fatalf("ban at %v expiring %v, want neither after the detector's time %v (+1h)", b.TS, b.ExpiresAt, now)
	}
}

// A limiter whose clock jumped ahead is still detected: its events are
// decided at the detector's time, and the ban expires one duration after
// the detector's time, not after the limiter's.
func TestFutureEventsAreDecidedAtDetectorTime(t *testing.T) {
	now := fixtureStart
	e := clockEngine(now, time.Minute)
	ahead := now.Add(24 * time.Hour)
	var in []abuse.Input
	for i := range 5 {
		in = append(in, abuse.Input{Partition: 0, Event: at(fmt.Sprint(i), ahead.Add(time.Duration(i)*time.Second), "limiter-fast", "203.0.113.9", fmt.Sprintf("/e/%d", i))})
	}
	out, st, err := e.Process(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if st.Future != 5 {
		t.Fatalf("stats %+v, want 5 future events", st)
	}
	if len(out) != 1 {
		t.Fatalf("outcomes %+v, want one scan ban", out)
	}
	b := out[0].Ban
	if !b.TS.Equal(now) || !b.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("ban at %v expiring %v, want at %v expiring an hour later", b.TS, b.ExpiresAt, now)
	}
}

// Within the tolerated skew an event keeps its own time, but it cannot
// make another limiter's events late (a partition's newest time stops at
// the detector's clock), nor make a ban outlast its duration.
func TestEventsWithinTheSkew(t *testing.T) {
	now := fixtureStart
	const skew = time.Minute
	e := clockEngine(now, skew)
	ctx := context.Background()
	steps := []struct {
		name   string
		ev     event.Decision
		future int
		late   int
	}{
		{"50s ahead: within the skew", at("a", now.Add(50*time.Second), "limiter-fast", "192.0.2.1", "/a"), 0, 0},
		{"25s behind the detector: in grace", at("b", now.Add(-25*time.Second), "limiter-1", "192.0.2.2", "/a"), 0, 0},
		{"61s ahead: beyond the skew", at("c", now.Add(61*time.Second), "limiter-fast", "192.0.2.3", "/a"), 1, 0},
		{"31s behind the detector: late", at("d", now.Add(-31*time.Second), "limiter-1", "192.0.2.4", "/a"), 0, 1},
	}
	for _, s := range steps {
		_, st, err := e.Process(ctx, []abuse.Input{{Partition: 0, Event: s.ev}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Future != s.future || st.Late != s.late {
			t.Errorf("%s: future %d, late %d; want %d, %d", s.name, st.Future, st.Late, s.future, s.late)
		}
	}

	// A scan whose last event is 50s ahead: banned at the detector's time.
	var in []abuse.Input
	for i := range 5 {
		in = append(in, abuse.Input{Partition: 1, Event: at(fmt.Sprint("s", i), now.Add(46*time.Second+time.Duration(i)*time.Second), "limiter-fast", "203.0.113.7", fmt.Sprint("/s/", i))})
	}
	out, _, err := e.Process(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || !out[0].Ban.TS.Equal(now) || !out[0].Ban.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("outcomes %+v, want one ban at %v expiring an hour later", out, now)
	}
	if last := out[0].Ban.Evidence.LastTS; !last.Equal(now.Add(50 * time.Second)) {
		t.Errorf("evidence last_ts %v, want the event's own time %v", last, now.Add(50*time.Second))
	}
}

// max_clock_skew sets where "ahead" begins; the default is a minute.
func TestMaxClockSkewSetting(t *testing.T) {
	now := fixtureStart
	for _, tc := range []struct {
		skew   time.Duration
		ahead  time.Duration
		future int
	}{
		{0, time.Minute, 0}, // zero: the default, 1m
		{0, time.Minute + time.Millisecond, 1},
		{time.Second, time.Second, 0},
		{time.Second, 2 * time.Second, 1},
		{time.Hour, 59 * time.Minute, 0},
	} {
		e := clockEngine(now, tc.skew)
		_, st, err := e.Process(context.Background(), []abuse.Input{{Event: at("a", now.Add(tc.ahead), "l", "192.0.2.1", "/")}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Future != tc.future {
			t.Errorf("skew %v, event %v ahead: %d future, want %d", tc.skew, tc.ahead, st.Future, tc.future)
		}
	}
}
