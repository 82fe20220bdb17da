package abuse_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/userid"
)

var (
	daves = []string{"dave", "Dave", "dAve", "DAVE", "ｄａｖｅ"}
	erins = []string{"erin", "Erin", "eRin", "ERIN", "ｅｒｉｎ"}
)

// With UserKey, every spelling of an account is one account: 5 sources
// failing on 5 spellings of dave are an account attack on "dave" (3), and
// one source failing on 5 spellings of erin is no credential stuffing (3
// distinct users); without it, the spellings are 5 accounts each.
func TestOutcomeSpellingsAreOneAccount(t *testing.T) {
	for _, tc := range []struct {
		name    string
		userKey func(string) string
		want    []string
	}{
		{"folded", userid.Fold, []string{"ban ip:198.51.100.1", "ban ip:198.51.100.2", "ban ip:198.51.100.3",
			"ban ip:198.51.100.4", "ban ip:198.51.100.5", "warn user:dave"}},
		{"as sent", nil, []string{"ban ip:203.0.113.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := &abusetest.Published{}
			e, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Now: afterFixtures, UserKey: tc.userKey,
				Detection: smallDetection(abuse.ReasonAccountAttack, abuse.ReasonCredentialStuffing)},
				abusetest.NewMemoryDistinct(), abusetest.NewMemoryLedger(), pub)
			if err != nil {
				t.Fatal(err)
			}
			var outs []event.Outcome
			for i := range daves {
				outs = append(outs,
					failure(fmt.Sprint("s", i), int64(i), fmt.Sprint("198.51.100.", i+1), daves[i], "/api/login", 401),
					failure(fmt.Sprint("c", i), int64(i), "203.0.113.1", erins[i], "/api/login", 401))
			}
			got, _, err := e.Process(t.Context(), outcomeInputs(0, outs...))
			if err != nil {
				t.Fatal(err)
			}
			if k := keys(got); !slices.Equal(slices.Sorted(slices.Values(k)), tc.want) {
				t.Errorf("%q, want %q", keys(got), tc.want)
			}
		})
	}
}

// With UserKey, the decisions of every spelling of a user are one
// offender's.
func TestEngineUserSpellingsAreOneOffender(t *testing.T) {
	det := rules.Detection{
		Ban:  []rules.BanPolicy{{Violations: 4, Within: dur(time.Minute), Duration: dur(time.Hour)}},
		Scan: &rules.ScanPolicy{DistinctEndpoints: 100, Within: dur(time.Second), Duration: dur(time.Hour)},
	}
	e := abuse.NewEngine(abuse.Config{Detection: det, Now: afterFixtures, UserKey: userid.Fold},
		abusetest.NewMemoryWindows(), abusetest.NewMemoryLedger(), &abusetest.Published{})
	var evs []event.Decision
	for i, u := range daves {
		evs = append(evs, deny(fmt.Sprint("d", i), int64(i), fmt.Sprint("198.51.100.", i+1), u, "/x"))
	}
	got, _, err := e.Process(t.Context(), inputs(0, evs...))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys(got), []string{"ban user:dave"}) {
		t.Errorf("%q, want the ban of user dave", keys(got))
	}
}
