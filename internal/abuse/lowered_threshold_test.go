package abuse_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// A reload lowering account_attack.distinct_sources under the count of a
// set that had not crossed the old threshold crosses at the set's next
// source: the account is warned and every source of the set banned, as
// they would have been had the file said 3 from the start. Before, an
// account attack only crossed when an add took its set from the threshold
// or less to more, so such a set never crossed again while it stayed over
// the new threshold (only each new source was banned).
func TestLoweredAccountAttackThresholdCrossesAtNextSource(t *testing.T) {
	t.Run("memory", func(t *testing.T) { loweredAccountAttack(t, abusetest.NewMemoryDistinct()) })
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		loweredAccountAttack(t, redisabuse.NewDistinct(rdb, redistest.Prefix(t, rdb)))
	})
}

func loweredAccountAttack(t *testing.T, d abuse.Distinct) {
	high := smallDetection(abuse.ReasonAccountAttack)
	high.AccountAttack.DistinctSources = 10
	pub := &abusetest.Published{}
	e, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: high, Now: afterFixtures},
		d, abusetest.NewMemoryLedger(), pub)
	if err != nil {
		t.Fatal(err)
	}
	var outs []event.Outcome
	for i := range 8 {
		outs = append(outs, failure(fmt.Sprint("aa-", i), int64(i)*1000, fmt.Sprint("198.51.100.", i+1), "erin", "/api/login", 401))
	}
	if got, _, err := e.Process(t.Context(), outcomeInputs(0, outs...)); err != nil || len(got) != 0 {
		t.Fatalf("8 sources under a threshold of 10: %q, %v", keys(got), err)
	}
	// The rules file is reloaded with a threshold of 3.
	low := smallDetection(abuse.ReasonAccountAttack)
	if err := e.SetConfig(abuse.OutcomeConfig{Detection: low, Now: afterFixtures}); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.Process(t.Context(), outcomeInputs(0, failure("aa-8", 8000, "198.51.100.9", "erin", "/api/login", 401)))
	if err != nil {
		t.Fatal(err)
	}
	warned, banned := false, 0
	for _, c := range got {
		switch {
		case c.Ban.Action == event.ActionWarn && c.Ban.Reason == abuse.ReasonAccountAttack:
			warned = true
		case c.Ban.Action == event.ActionBan && c.Ban.Scope == event.ScopeIP:
			banned++
		}
	}
	if !warned || banned < 9 {
		t.Errorf("9th source after lowering the threshold to 3: %q; want the account warned and its 9 sources banned", keys(got))
	}
}

// A reload lowering a ban's violations threshold bans an offender already
// over the new threshold at its next violation: a window's count is
// compared with the threshold in force at every violation, so no crossing
// is needed, as with a file that said 3 from the start.
func TestLoweredViolationsThresholdBansAtNextViolation(t *testing.T) {
	t.Run("memory", func(t *testing.T) { loweredViolations(t, abusetest.NewMemoryWindows()) })
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		loweredViolations(t, redisabuse.NewWindows(rdb, redistest.Prefix(t, rdb)))
	})
}

func loweredViolations(t *testing.T, w abuse.Windows) {
	ban := func(violations int64) rules.Detection {
		return rules.Detection{Ban: []rules.BanPolicy{{Violations: violations, Within: dur(time.Minute), Duration: dur(time.Hour)}}}
	}
	e := abuse.NewEngine(abuse.Config{Detection: ban(10), Now: afterFixtures}, w, abusetest.NewMemoryLedger(), &abusetest.Published{})
	var evs []event.Decision
	for i := range 6 {
		evs = append(evs, deny(fmt.Sprint("v-", i), int64(i)*1000, "192.0.2.9", "", "/api/books"))
	}
	if got, _, err := e.Process(t.Context(), inputs(0, evs...)); err != nil || len(got) != 0 {
		t.Fatalf("6 violations under a threshold of 10: %q, %v", keys(got), err)
	}
	e.SetConfig(abuse.Config{Detection: ban(3), Now: afterFixtures})
	got, _, err := e.Process(t.Context(), inputs(0, deny("v-6", 6000, "192.0.2.9", "", "/api/books")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Ban.Action != event.ActionBan || got[0].Ban.Subject != "192.0.2.9" || got[0].Ban.Count != 7 {
		t.Errorf("7th violation after lowering the threshold to 3: %+v; want the source banned on a count of 7", got)
	}
}
