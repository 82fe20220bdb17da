package digest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// A user-scope ban's subject is a user id an attacker chose (the names
// tried in a credential-stuffing run), and anyone who may write to the bans
// topic writes its notes and sample endpoints. Were newlines kept, such a
// text would start lines of its own in the security channel: a forged bold
// "*URGENT* ... re-login at https://evil.example/sso" line (Slack links a
// bare URL) or forged "• `ip`" example lines. A ban's texts stay on their
// example's line: control characters become spaces.
func TestSlackTextsOfABanStayOnTheirExampleLine(t *testing.T) {
	now := time.Now().UTC()
	ban := event.Ban{BanID: "b1", TS: now, Action: event.ActionBan, Scope: event.ScopeUser,
		Subject: "victim\n*URGENT* all bans lifted, re-login: https://evil.example/sso", Reason: "credential_stuffing",
		Note:     "n\r\n• `203.0.113.9` forged example",
		Evidence: event.Evidence{SampleEndpoints: []string{"/x\n\n*SPOOFED*", "/y\u2028*SPOOFED*\u202egro.live"}}}
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
	if strings.ContainsAny(examples, "\r\u2028\u2029\u202e") || !strings.Contains(examples, "on `/x  *SPOOFED*`") {
		t.Errorf("a separator or a bidi control kept, or an endpoint not in a code span: %q", examples)
	}
}
