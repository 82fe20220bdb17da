package digest

// Tests that reproduce weaknesses found by attacking the notifier binary.
// They FAIL on this branch by design: each documents an attack and the
// behaviour expected once it is fixed.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Attack: a user-scope ban's subject is a user id the attacker chose (the
// names tried in a credential-stuffing run). slackEscape escapes &, < and >
// (so no mention or link markup gets through: that held on the binary) but
// keeps newlines, so a subject or a sample endpoint starts lines of its own
// in the security channel: a forged bold "*URGENT* ... re-login at
// https://evil.example/sso" line (Slack links a bare URL) or forged "• `ip`"
// example lines. Reproduced by a ban on the topic through the notifier
// binary to a Slack-format receiver.
//
// Expected: a ban's texts stay on their example's line (control characters
// replaced by a space, say).
func TestAttackSlackSubjectCannotStartALine(t *testing.T) {
	now := time.Now().UTC()
	ban := event.Ban{BanID: "b1", TS: now, Action: event.ActionBan, Scope: event.ScopeUser,
		Subject: "victim\n*URGENT* all bans lifted, re-login: https://evil.example/sso", Reason: "credential_stuffing",
		Note:     "n\r\n• `203.0.113.9` forged example",
		Evidence: event.Evidence{SampleEndpoints: []string{"/x\n\n*SPOOFED*"}}}
	b := NewBuilder(now.Truncate(time.Minute), now.Truncate(time.Minute).Add(time.Minute), 5)
	b.Add("slack", &ban)
	d := b.Digests()[0]
	raw, err := Slack(&d)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Blocks []struct {
			Text struct{ Text string } `json:"text"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	examples := body.Blocks[1].Text.Text
	if lines := strings.Split(examples, "\n"); len(lines) != 2 { // the example, the idempotency key
		t.Errorf("one example became %d lines in Slack:\n%s", len(lines)-1, examples)
	}
}

// Attack: anyone who may write to the bans topic publishes, within one
// window, messages of distinct reasons ("scenario_0", "scenario_1", ...).
// Every receiver gets one digest, so one webhook POST, per reason: on the
// binary, 3000 warnings gave 3000 posts to each receiver. A Slack webhook
// takes about one message a second (then 429, retried without end), so the
// window takes the better part of an hour to close (NOTIFY_MAX_PENDING of
// them: hours) while the channel is flooded, and every real ban published
// meanwhile waits behind it.
//
// Expected: a receiver's digests of one window are bounded (the largest
// groups, then one digest for the rest with their counts), so the messages
// a window costs a receiver do not grow with the attacker's variety.
func TestAttackDistinctScenariosDoNotMultiplyDigests(t *testing.T) {
	now := time.Now().UTC()
	b := NewBuilder(now.Truncate(time.Minute), now.Truncate(time.Minute).Add(time.Minute), 5)
	for i := range 3000 {
		b.Add("slack", &event.Ban{BanID: fmt.Sprint("w", i), TS: now, Action: event.ActionWarn, Scope: event.ScopeIP,
			Subject: "192.0.2.1", Reason: fmt.Sprint("scenario_", i)})
	}
	const bound = 100 // generous: a detector has a few dozen scenarios
	if n := len(b.Digests()); n > bound {
		t.Errorf("3000 warnings of distinct reasons in one window: %d digests (so %d posts) for one receiver, want at most %d", n, n, bound)
	}
}
