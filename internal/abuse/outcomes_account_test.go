package abuse_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// A locked (user_banned) or exempt account stops its own scenario only:
// the address that fails on it 5 times is banned for brute force (4), and
// the 5 addresses that fail on it are no account attack (3); on an account
// in no such state the same failures are both.
func TestHeldAccountHidesNoAttacker(t *testing.T) {
	det := smallDetection(abuse.ReasonBruteForce, abuse.ReasonAccountAttack)
	attack := func(user string, locked bool) []event.Outcome {
		var outs []event.Outcome
		for i := range 5 {
			outs = append(outs, failure(fmt.Sprint(user, "-a", i), int64(i), "203.0.113.1", user, "/api/login", 401))
		}
		for i := range 4 {
			outs = append(outs, failure(fmt.Sprint(user, "-s", i), int64(10+i), fmt.Sprint("198.51.100.", i+1), user, "/api/login", 401))
		}
		for i := range outs {
			outs[i].UserBanned = locked
		}
		return outs
	}
	for _, tc := range []struct {
		name     string
		outs     []event.Outcome
		held     int
		accounts bool // an account attack on the user
	}{
		{"locked account", attack("carol", true), 9, false},
		{"exempt account", attack("ops-bot", false), 9, false},
		{"account", attack("dave", false), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := &abusetest.Published{}
			e, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: afterFixtures,
				ExemptUser: func(s event.Subject) bool { return s.UserID == "ops-bot" }},
				abusetest.NewMemoryDistinct(), abusetest.NewMemoryLedger(), pub)
			if err != nil {
				t.Fatal(err)
			}
			got, st, err := e.Process(t.Context(), outcomeInputs(0, tc.outs...))
			if err != nil {
				t.Fatal(err)
			}
			reasons := map[string]int{}
			for _, o := range got {
				reasons[o.Ban.Reason]++
			}
			if !slices.Contains(keys(got), "ban ip:203.0.113.1") || reasons[abuse.ReasonBruteForce] != 1 {
				t.Errorf("%q, want the brute-force ban of 203.0.113.1", keys(got))
			}
			if (reasons[abuse.ReasonAccountAttack] > 0) != tc.accounts {
				t.Errorf("%q: account attack %v, want %v", keys(got), reasons[abuse.ReasonAccountAttack] > 0, tc.accounts)
			}
			if st.HeldAccounts != tc.held || st.Failures != 9 || st.Skipped != 0 {
				t.Errorf("stats %+v, want %d held of 9 failures", st, tc.held)
			}
		})
	}
}
