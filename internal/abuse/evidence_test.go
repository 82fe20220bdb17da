package abuse_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// A scan of the longest endpoints events may carry, by the longest user id,
// with the most samples the rules allow, gives bans whose samples are cut
// to MaxSampleBytes on a rune boundary, and whose messages stay far below
// the 1 MiB a Kafka message may be by default, even with every character
// escaped by the JSON encoder ('<' is written \u003c).
func TestBanEvidenceIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill string
	}{
		{"escaped characters", "<"},
		{"two-byte runes", "é"}, // where the cut falls depends on the prefix's parity
	} {
		t.Run(tc.name, func(t *testing.T) {
			det := rules.Detection{
				Ban:     []rules.BanPolicy{},
				Scan:    &rules.ScanPolicy{DistinctEndpoints: 50, Within: dur(10 * time.Second), Duration: dur(time.Hour)},
				Samples: 50,
			}
			e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
			user := strings.Repeat("<", event.MaxUserID)
			var evs []event.Decision
			for i := range 50 {
				endpoint := fmt.Sprintf("/%d/%s", i, strings.Repeat(tc.fill, event.MaxEndpoint/len(tc.fill)))[:event.MaxEndpoint]
				ev := deny(fmt.Sprint(i), int64(i), "192.0.2.1", user, endpoint)
				ev.Allowed, ev.Reason = true, event.ReasonOK
				evs = append(evs, ev)
			}
			out, _, err := e.Process(context.Background(), inputs(0, evs...))
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 2 {
				t.Fatalf("%d outcomes, want a scan ban of the ip and of the user", len(out))
			}
			for _, o := range out {
				samples := o.Ban.Evidence.SampleEndpoints
				if len(samples) != 50 {
					t.Fatalf("%d samples, want 50", len(samples))
				}
				for _, s := range samples {
					if len(s) > abuse.MaxSampleBytes || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
						t.Fatalf("sample of %d bytes (valid UTF-8 %v): %q", len(s), utf8.ValidString(s), s)
					}
				}
				msg, err := event.EncodeBan(o.Ban)
				if err != nil {
					t.Fatal(err)
				}
				if len(msg) > 100_000 {
					t.Errorf("a %s ban of %d bytes, want under 100 KB", o.Ban.Scope, len(msg))
				}
				t.Logf("%s ban: %d bytes", o.Ban.Scope, len(msg))
			}
		})
	}
}

// Samples within the bound are kept as they are.
func TestShortSamplesAreKept(t *testing.T) {
	det := rules.Detection{
		Ban:  []rules.BanPolicy{},
		Scan: &rules.ScanPolicy{DistinctEndpoints: 2, Within: dur(10 * time.Second), Duration: dur(time.Hour)},
	}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures}, abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	exact := "/" + strings.Repeat("x", abuse.MaxSampleBytes-1)
	out, _, err := e.Process(context.Background(), inputs(0, deny("a", 0, "192.0.2.1", "", "/a"), deny("b", 1, "192.0.2.1", "", exact)))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || len(out[0].Ban.Evidence.SampleEndpoints) != 2 || out[0].Ban.Evidence.SampleEndpoints[0] != exact {
		t.Fatalf("outcomes %+v, want the samples %q and /a", out, exact)
	}
}
