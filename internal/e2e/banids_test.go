package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// repeatBanRules: three violations within an hour ban for a minute, and
// each ban within the hour doubles the next.
const repeatBanRules = `
rules: []
detection:
  ban: [{violations: 3, within: 1h, duration: 1m}]
  escalation: {factor: 2, cap: 1h, period: 1h}
`

// An offender crosses a threshold whose ban is shorter than its window,
// then crosses it again after the ban has expired: the second ban has an
// id of its own, escalates, and is archived beside the first. The same
// events produced again (a producer's retry) publish nothing new.
func TestRepeatBanHasItsOwnID(t *testing.T) {
	e, db := archiverEnv(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(repeatBanRules), 0o600); err != nil {
		t.Fatal(err)
	}
	e.vars["RULES_FILE"] = path
	e.start("detector")
	e.start("archiver")

	base := time.Now().UTC().Add(-10 * time.Minute)
	var values [][]byte
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second, 5 * time.Minute} {
		ev := event.Decision{EventID: uuid.NewString(), TS: base.Add(at), Instance: "e2e", IP: "198.51.100.77",
			Endpoint: "/api/login", Method: "POST", RuleID: "login", Algorithm: "fixed_window",
			Reason: event.ReasonRateLimited, Limit: 5, Mode: "redis"}
		values = append(values, ev.AppendJSON(nil))
	}
	produce(t, e, decisionsTopic, values...)
	waitDrained(t, e, e.vars["DETECTOR_GROUP_ID"], decisionsTopic, 30*time.Second)
	got := bans(t, e, 2)
	if got[0].BanID == got[1].BanID {
		t.Fatalf("both bans have the id %s", got[0].BanID)
	}
	if got[0].Reason != got[1].Reason || got[0].DurationS != 60 || got[1].DurationS != 120 {
		t.Errorf("bans %s for %ds and %s for %ds, want the same reason, 60s then 120s",
			got[0].Reason, got[0].DurationS, got[1].Reason, got[1].DurationS)
	}
	testkit.WaitFor(t, 30*time.Second, "both bans archived", func() bool { return count(t, db, "SELECT count(*) FROM bans") == 2 })

	produce(t, e, decisionsTopic, values...)
	waitDrained(t, e, e.vars["DETECTOR_GROUP_ID"], decisionsTopic, 30*time.Second)
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 2 {
		t.Errorf("%d ban messages after the same events were produced again, want 2", n)
	}
	if n := count(t, db, "SELECT count(DISTINCT ban_id) FROM bans"); n != 2 {
		t.Errorf("%d ban ids archived, want 2", n)
	}
}
