package abuse_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

func dur(d time.Duration) rules.Duration { return rules.Duration(d) }

// deny is a rate-limited decision of ip at fixtureStart+ms.
func deny(id string, ms int64, ip, user, endpoint string) event.Decision {
	return event.Decision{EventID: id, TS: fixtureStart.Add(time.Duration(ms) * time.Millisecond), IP: ip, UserID: user,
		Endpoint: endpoint, Reason: event.ReasonRateLimited}
}

func inputs(partition int, evs ...event.Decision) []abuse.Input {
	in := make([]abuse.Input, len(evs))
	for i, e := range evs {
		in[i] = abuse.Input{Partition: partition, Event: e}
	}
	return in
}

func TestEngineSpec(t *testing.T) {
	det := rules.Detection{
		Warn: &rules.WarnPolicy{Violations: 3, Within: dur(time.Minute)},
		Ban: []rules.BanPolicy{
			{Violations: 10, Within: dur(time.Hour), Duration: dur(time.Hour)},
			{Violations: 7, Within: dur(time.Minute), Duration: dur(time.Minute)},
		},
		Scan: &rules.ScanPolicy{DistinctEndpoints: 20, Within: dur(5 * time.Second), Duration: dur(time.Hour)},
	}
	got := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, nil, nil, nil).Spec()
	want := abuse.WindowSpec{
		Violations: []time.Duration{time.Minute, time.Hour}, Scan: 5 * time.Second, ScanCap: 21,
		MaxViolations: 10, Samples: 5, Grace: 30 * time.Second,
		ScanThreshold: 20, ViolationThresholds: []int64{3, 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Spec() = %+v, want %+v", got, want)
	}
}

// TestEngineBanChoice: one ban per offender and event, the longest base
// duration winning, ties to scan, then to the first ban level.
func TestEngineBanChoice(t *testing.T) {
	level := func(v int64, within, d time.Duration) rules.BanPolicy {
		return rules.BanPolicy{Violations: v, Within: dur(within), Duration: dur(d)}
	}
	tests := []struct {
		name       string
		scanFor    time.Duration
		ban        []rules.BanPolicy
		wantReason string
		wantS      int64
	}{
		{"longest level wins", time.Minute, []rules.BanPolicy{level(2, 5*time.Second, time.Hour), level(2, 90*time.Second, 2*time.Hour)}, "violations_90s", 7200},
		{"scan wins a tie", time.Hour, []rules.BanPolicy{level(2, time.Minute, time.Hour)}, "scan", 3600},
		{"first level wins a tie", time.Minute, []rules.BanPolicy{level(2, 500*time.Millisecond+4500*time.Millisecond, time.Hour), level(2, time.Minute, time.Hour)}, "violations_5s", 3600},
		{"scan longer", 3 * time.Hour, []rules.BanPolicy{level(2, time.Minute, time.Hour)}, "scan", 3 * 3600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			det := rules.Detection{
				Warn: &rules.WarnPolicy{Violations: 100, Within: dur(time.Minute)},
				Ban:  tt.ban,
				Scan: &rules.ScanPolicy{DistinctEndpoints: 2, Within: dur(10 * time.Second), Duration: dur(tt.scanFor)},
			}
			e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
			out, st, err := e.Process(context.Background(), inputs(0,
				deny("a", 0, "192.0.2.1", "", "/a"), deny("b", 100, "192.0.2.1", "", "/b")))
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 || out[0].Ban.Reason != tt.wantReason || out[0].Ban.DurationS != tt.wantS {
				t.Fatalf("outcomes = %+v, want one %s ban of %ds", out, tt.wantReason, tt.wantS)
			}
			if st.Bans[tt.wantReason] != 1 || len(st.Warnings) != 0 {
				t.Errorf("stats = %+v", st)
			}
			if !slices.Contains(e.BanReasons(), tt.wantReason) {
				t.Errorf("BanReasons() = %q lacks %q: its series would not start at 0", e.BanReasons(), tt.wantReason)
			}
		})
	}
}

func TestEngineLatenessPerPartition(t *testing.T) {
	det := rules.DefaultDetection()
	det.Warn = &rules.WarnPolicy{Violations: 2, Within: dur(time.Minute)}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	ctx := context.Background()
	steps := []struct {
		name      string
		in        []abuse.Input
		late      int
		published int
	}{
		{"partition 0 reaches 60s", inputs(0, deny("p0", 60000, "192.0.2.9", "", "/")), 0, 0},
		{"30s behind is in grace", inputs(0, deny("a", 30000, "192.0.2.1", "", "/")), 0, 0},
		{"30.001s behind is late", inputs(0, deny("b", 29999, "192.0.2.1", "", "/")), 1, 0},
		{"another partition has its own mark", inputs(1, deny("c", 29999, "192.0.2.1", "", "/")), 0, 1},
	}
	for _, st := range steps {
		out, stats, err := e.Process(ctx, st.in)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Late != st.late || len(out) != st.published {
			t.Errorf("%s: late %d, %d outcomes; want %d, %d", st.name, stats.Late, len(out), st.late, st.published)
		}
	}
}

// The reasons the engine lists for its bans and warnings follow the
// detection settings, and are those its outcomes carry.
func TestEngineReasons(t *testing.T) {
	level := func(within time.Duration) rules.BanPolicy {
		return rules.BanPolicy{Violations: 2, Within: dur(within), Duration: dur(time.Hour)}
	}
	tests := []struct {
		name     string
		det      rules.Detection
		bans     []string
		warnings []string
	}{
		{"defaults", rules.Detection{}, []string{"scan", "violations_1h"}, []string{"violations_5m"}},
		{"levels in order, once each", rules.Detection{
			Warn: &rules.WarnPolicy{Violations: 2, Within: dur(90 * time.Second)},
			Ban:  []rules.BanPolicy{level(time.Hour), level(time.Minute), level(time.Hour)},
			Scan: &rules.ScanPolicy{DistinctEndpoints: 2, Within: dur(10 * time.Second), Duration: dur(time.Hour)},
		}, []string{"scan", "violations_1h", "violations_1m"}, []string{"violations_90s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := abuse.NewEngine(abuse.Config{Detection: tt.det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
			if got := e.BanReasons(); !slices.Equal(got, tt.bans) {
				t.Errorf("BanReasons() = %q, want %q", got, tt.bans)
			}
			if got := e.WarnReasons(); !slices.Equal(got, tt.warnings) {
				t.Errorf("WarnReasons() = %q, want %q", got, tt.warnings)
			}
		})
	}
	t.Run("outcomes carry listed reasons", func(t *testing.T) {
		e := abuse.NewEngine(abuse.Config{Detection: tests[1].det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
		_, st, err := e.Process(context.Background(), inputs(0,
			deny("a", 0, "192.0.2.1", "", "/a"), deny("b", 1, "192.0.2.1", "", "/a"), // violations
			deny("c", 2, "192.0.2.2", "", "/a"), deny("d", 3, "192.0.2.2", "", "/b"))) // scan
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Bans) == 0 || len(st.Warnings) == 0 {
			t.Fatalf("stats = %+v, want bans and warnings", st)
		}
		for reason := range st.Bans {
			if !slices.Contains(e.BanReasons(), reason) {
				t.Errorf("a ban for %q, which BanReasons() %q does not list", reason, e.BanReasons())
			}
		}
		for reason := range st.Warnings {
			if !slices.Contains(e.WarnReasons(), reason) {
				t.Errorf("a warning for %q, which WarnReasons() %q does not list", reason, e.WarnReasons())
			}
		}
	})
}

// A ban and a warning of the same window and anchor get distinct ids.
func TestEngineWarnAndBanIDsDiffer(t *testing.T) {
	det := rules.Detection{
		Warn: &rules.WarnPolicy{Violations: 2, Within: dur(time.Minute)},
		Ban:  []rules.BanPolicy{{Violations: 2, Within: dur(time.Minute), Duration: dur(time.Hour)}},
	}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	out, _, err := e.Process(context.Background(), inputs(0, deny("a", 0, "192.0.2.1", "", "/"), deny("b", 1, "192.0.2.1", "", "/")))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Ban.Action != event.ActionBan || out[1].Ban.Action != event.ActionWarn || out[0].Ban.BanID == out[1].Ban.BanID {
		t.Fatalf("outcomes = %+v", out)
	}
}

func TestEngineShadowAndScopes(t *testing.T) {
	det := rules.DefaultDetection()
	det.Warn = &rules.WarnPolicy{Violations: 1, Within: dur(time.Minute)}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	shadow := event.Decision{EventID: "s", TS: fixtureStart, IP: "192.0.2.1", UserID: "u-1", Endpoint: "/", Allowed: true, Shadow: true, Reason: event.ReasonRateLimited}
	allowed := event.Decision{EventID: "ok", TS: fixtureStart, IP: "192.0.2.2", Endpoint: "/", Allowed: true, Reason: event.ReasonOK}
	out, _, err := e.Process(context.Background(), inputs(0, shadow, allowed))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, o.Ban.Action+" "+o.Ban.Key())
	}
	if want := []string{"warn ip:192.0.2.1", "warn user:u-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
}

// Decisions without a client address (rate limit API calls without one
// carry the unspecified address) never make an IP offender; their user
// still counts.
func TestEngineIgnoresTheUnspecifiedAddress(t *testing.T) {
	det := rules.DefaultDetection()
	det.Warn = &rules.WarnPolicy{Violations: 1, Within: dur(time.Minute)}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	out, _, err := e.Process(context.Background(), inputs(0,
		deny("a", 0, "0.0.0.0", "", "/"), deny("b", 1, "::", "u-1", "/"), deny("c", 2, "192.0.2.1", "", "/")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, o.Ban.Action+" "+o.Ban.Key())
	}
	if want := []string{"warn user:u-1", "warn ip:192.0.2.1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
}

// A denial made without Redis (mode local: a local limit, or a decision
// refused because its round trip timed out) is no violation; a denial
// decided in Redis is.
func TestEngineIgnoresDenialsMadeWithoutRedis(t *testing.T) {
	det := rules.DefaultDetection()
	det.Warn = &rules.WarnPolicy{Violations: 1, Within: dur(time.Minute)}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	local, inRedis := deny("a", 0, "192.0.2.1", "", "/"), deny("b", 1, "192.0.2.2", "", "/")
	local.Mode, inRedis.Mode = event.ModeLocal, event.ModeRedis
	out, _, err := e.Process(context.Background(), inputs(0, local, inRedis))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range out {
		got = append(got, o.Ban.Action+" "+o.Ban.Key())
	}
	if want := []string{"warn ip:192.0.2.2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
}

type failingWindows struct{ err error }

func (f failingWindows) Record(context.Context, abuse.WindowSpec, []abuse.Sighting) ([]abuse.Tally, error) {
	return nil, f.err
}

// A failed batch leaves no trace in the engine: retried, it gives what a
// first attempt would have.
func TestEngineErrorKeepsNoState(t *testing.T) {
	boom := errors.New("boom")
	det := rules.DefaultDetection()
	w := &switchWindows{Windows: failingWindows{boom}}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, w, abusetest.NewMemoryLedger(), &abusetest.Published{})
	ctx := context.Background()
	batch := inputs(0, deny("a", 10000, "192.0.2.1", "", "/a"), deny("b", 100000, "192.0.2.2", "", "/b"))
	if _, _, err := e.Process(ctx, batch); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	w.Windows = abusetest.NewMemoryWindows()
	_, st, err := e.Process(ctx, batch)
	if err != nil || st.Late != 0 || st.Consumed != 2 {
		t.Fatalf("retry: %+v, %v", st, err)
	}
}

type switchWindows struct{ abuse.Windows }

// TestEngineRepeatBanIDs: a ban shorter than its window, then the same
// offender over the same threshold again once it has expired: the second
// ban has an id of its own and escalates. A detection whose publication
// failed is published again under its first id when the batch is retried.
func TestEngineRepeatBanIDs(t *testing.T) {
	det := rules.Detection{
		Ban:        []rules.BanPolicy{{Violations: 3, Within: dur(time.Hour), Duration: dur(time.Minute)}},
		Escalation: rules.EscalationPolicy{Factor: 2, Cap: dur(time.Hour), Period: dur(time.Hour)},
	}
	ctx := context.Background()
	pub := &abusetest.Published{Fail: errors.New("broker down")}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), pub)
	const ip = "192.0.2.1"
	crossing := []event.Decision{deny("a", 0, ip, "", "/"), deny("b", 1000, ip, "", "/"), deny("c", 2000, ip, "", "/")}
	if _, _, err := e.Process(ctx, inputs(0, crossing...)); err == nil {
		t.Fatal("a batch whose ban could not be published succeeded")
	}
	pub.Fail = nil
	process := func(evs ...event.Decision) []abuse.Claimed {
		t.Helper()
		out, _, err := e.Process(ctx, inputs(0, evs...))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := process(crossing...) // the batch retried
	if len(first) != 1 || len(pub.Bans()) != 1 || pub.Bans()[0].BanID != first[0].Ban.BanID {
		t.Fatalf("retried batch: %+v, published %+v; want the one ban", first, pub.Bans())
	}
	// Five minutes on, the one-minute ban has expired; the window still
	// holds the first violations.
	second := process(deny("d", 5*60_000, ip, "", "/"))
	if len(second) != 1 {
		t.Fatalf("crossing again after the ban expired: %+v, want one ban", second)
	}
	if second[0].Ban.BanID == first[0].Ban.BanID {
		t.Errorf("second ban reuses the first ban's id %s", first[0].Ban.BanID)
	}
	if second[0].Ban.Reason != first[0].Ban.Reason || second[0].Ban.DurationS != 120 {
		t.Errorf("second ban %s for %ds, want %s escalated to 120s", second[0].Ban.Reason, second[0].Ban.DurationS, first[0].Ban.Reason)
	}
}

// The addresses of one IPv6 /64 are one offender: a scan spread over them
// is banned, and the ban names the prefix. Another /64 counts apart;
// ipv6_prefix 128 counts every address apart.
func TestEngineGroupsIPv6Offenders(t *testing.T) {
	scanOf3 := func(bits int) rules.Detection {
		return rules.Detection{
			Warn:       &rules.WarnPolicy{Violations: 100, Within: dur(time.Minute)},
			Ban:        []rules.BanPolicy{},
			Scan:       &rules.ScanPolicy{DistinctEndpoints: 3, Within: dur(10 * time.Second), Duration: dur(time.Hour)},
			IPv6Prefix: bits,
		}
	}
	spread := inputs(0,
		deny("a", 0, "2001:db8:1:2::a", "", "/a"),
		deny("b", 100, "2001:db8:1:2:ffff::b", "", "/b"),
		deny("x", 150, "2001:db8:1:3::a", "", "/x"), // the next /64
		deny("c", 200, "2001:db8:1:2:1:2:3:4", "", "/c"))
	tests := []struct {
		name string
		det  rules.Detection
		want []string
	}{
		{"default /64", scanOf3(0), []string{"ban ip:2001:db8:1:2::/64 scan 3"}},
		{"/48 takes in the next /64", scanOf3(48), []string{"ban ip:2001:db8:1::/48 scan 3"}},
		{"128 counts each address", scanOf3(128), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := abuse.NewEngine(abuse.Config{Detection: tt.det}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
			out, _, err := e.Process(context.Background(), spread)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range out {
				got = append(got, fmt.Sprintf("%s %s %s %d", o.Ban.Action, o.Ban.Key(), o.Ban.Reason, o.Ban.Count))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("outcomes %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("violations add up over the prefix", func(t *testing.T) {
		det := rules.Detection{
			Warn: &rules.WarnPolicy{Violations: 100, Within: dur(time.Minute)},
			Ban:  []rules.BanPolicy{{Violations: 3, Within: dur(time.Minute), Duration: dur(time.Hour)}},
		}
		e := abuse.NewEngine(abuse.Config{Detection: det}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
		out, _, err := e.Process(context.Background(), inputs(0,
			deny("a", 0, "2001:db8::1", "", "/"), deny("b", 1, "2001:db8::2", "", "/"), deny("c", 2, "2001:db8::3", "", "/"),
			deny("d", 3, "203.0.113.1", "", "/"), deny("e", 4, "203.0.113.2", "", "/"), deny("f", 5, "203.0.113.3", "", "/")))
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 1 || out[0].Ban.Subject != "2001:db8::/64" || out[0].Ban.Reason != "violations_1m" {
			t.Fatalf("outcomes %+v, want one violations ban of 2001:db8::/64 (IPv4 addresses are never grouped)", out)
		}
	})
}

// SetConfig puts new thresholds in force on a running engine: its spec,
// reasons and clock skew are the new configuration's.
func TestEngineSetConfig(t *testing.T) {
	ban := func(v int64, within time.Duration) rules.Detection {
		return rules.Detection{Ban: []rules.BanPolicy{{Violations: v, Within: dur(within), Duration: dur(time.Hour)}}}
	}
	e := abuse.NewEngine(abuse.Config{Detection: ban(3, time.Minute), Now: afterFixtures}, nil, nil, nil)
	if got := e.Spec().ViolationThresholds; !slices.Contains(got, 3) {
		t.Fatalf("thresholds %v at start, want 3 among them", got)
	}
	next := ban(2, time.Hour)
	next.MaxClockSkew = dur(time.Minute)
	e.SetConfig(abuse.Config{Detection: next, Now: afterFixtures})
	if got := e.Spec(); !slices.Contains(got.ViolationThresholds, 2) || slices.Contains(got.ViolationThresholds, 3) ||
		!slices.Contains(got.Violations, time.Hour) {
		t.Errorf("spec %+v after SetConfig, want the threshold 2 within 1h, not 3", got)
	}
	if got := e.BanReasons(); !slices.Contains(got, "violations_1h") || slices.Contains(got, "violations_1m") {
		t.Errorf("ban reasons %v, want violations_1h and not violations_1m", got)
	}
	if got := e.MaxClockSkew(); got != time.Minute {
		t.Errorf("max clock skew %v, want 1m", got)
	}
}

// SetConfig on an outcome engine puts the scenarios of the new
// configuration in force.
func TestOutcomeEngineSetConfig(t *testing.T) {
	off := false
	e, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Now: afterFixtures}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := e.BanReasons()
	if !slices.Contains(before, abuse.ReasonBruteForce) {
		t.Fatalf("ban reasons %v at start, want brute_force among them", before)
	}
	det := rules.Detection{BruteForce: &rules.BruteForcePolicy{OutcomeScenario: rules.OutcomeScenario{Enabled: &off}}}
	if err := e.SetConfig(abuse.OutcomeConfig{Detection: det, Now: afterFixtures}); err != nil {
		t.Fatal(err)
	}
	if got := e.BanReasons(); slices.Contains(got, abuse.ReasonBruteForce) || len(got) != len(before)-1 {
		t.Errorf("ban reasons %v after brute_force was turned off, want those of %v but it", got, before)
	}
}
