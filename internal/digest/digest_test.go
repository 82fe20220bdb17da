package digest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// stuffing returns n credential-stuffing bans of distinct addresses from t0.
func stuffing(n int, t0 time.Time) []event.Ban {
	out := make([]event.Ban, n)
	for i := range out {
		out[i] = event.Ban{BanID: fmt.Sprintf("ban-%03d", i), TS: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Action: event.ActionBan, Scope: event.ScopeIP, Subject: fmt.Sprintf("198.51.100.%d", i%250), Reason: "credential_stuffing",
			Count: 40, Threshold: 20, WindowS: 300, DurationS: 3600, Source: "detector",
			Evidence: event.Evidence{SampleEndpoints: []string{"/login"}, SampleUsers: []string{"a", "b", "c", "d", "e", "f", "g"}}}
	}
	return out
}

func build(bans []event.Ban, examples int) []Digest {
	b := NewBuilder(time.Unix(0, 0), time.Unix(30, 0), examples)
	for i := range bans {
		b.Add("security", &bans[i])
	}
	return b.Digests()
}

// 200 bans of one scenario in a window are one digest: their count, five
// examples, and a key that does not depend on the order they came in or
// on a ban delivered twice.
func TestTwoHundredBansAreOneDigest(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	bans := stuffing(200, t0)
	got := build(bans, 5)
	if len(got) != 1 {
		t.Fatalf("%d digests, want 1", len(got))
	}
	d := got[0]
	if d.Count != 200 || len(d.Examples) != 5 || d.Scenario != "credential_stuffing" || d.Scope != event.ScopeIP || d.Action != event.ActionBan {
		t.Fatalf("digest %+v", d.Group)
	}
	if !d.FirstTS.Equal(t0) || !d.LastTS.Equal(bans[199].TS) {
		t.Errorf("bounds %v %v", d.FirstTS, d.LastTS)
	}
	if n := len(d.Examples[0].Evidence.SampleUsers); n != maxSamples {
		t.Errorf("an example keeps %d sample users, want %d", n, maxSamples)
	}

	shuffled := append([]event.Ban(nil), bans...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	shuffled = append(shuffled, bans[17], bans[42]) // redelivered
	again := build(shuffled, 5)[0]
	if again.Key != d.Key || again.Count != 200 {
		t.Fatalf("shuffled with duplicates: key %s count %d, want %s 200", again.Key, again.Count, d.Key)
	}
	for i := range d.Examples {
		if again.Examples[i].BanID != d.Examples[i].BanID {
			t.Fatalf("examples differ with the order: %s vs %s", again.Examples[i].BanID, d.Examples[i].BanID)
		}
	}
	if other := build(bans[:199], 5)[0]; other.Key == d.Key {
		t.Error("199 bans have the key of 200")
	}
}

// Bans differing in action, scope or scenario are digests of their own,
// ordered; each receiver's digests have keys of their own.
func TestDigestsGroupByActionScopeScenario(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	bans := stuffing(3, t0)
	bans[1].Scope, bans[1].Subject = event.ScopeUser, "dave"
	bans[2].Action, bans[2].Reason, bans[2].Source = event.ActionUnban, "manual", SourceManual
	b := NewBuilder(t0, t0.Add(time.Minute), 5)
	for i := range bans {
		b.Add("a", &bans[i])
		b.Add("b", &bans[i])
	}
	got := b.Digests()
	if len(got) != 6 {
		t.Fatalf("%d digests, want 6", len(got))
	}
	keys := map[string]bool{}
	for i, d := range got {
		keys[d.Key] = true
		if d.Count != 1 {
			t.Errorf("digest %d counts %d", i, d.Count)
		}
		if i > 0 && got[i-1].Receiver > d.Receiver {
			t.Errorf("digests not ordered by receiver")
		}
	}
	if len(keys) != 6 {
		t.Errorf("%d distinct keys, want 6", len(keys))
	}
}

// A ban held is bounded whatever its message held; a long ban id stays
// distinct.
func TestTrim(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	b := event.Ban{BanID: long + "1", Subject: long, Note: long,
		Evidence: event.Evidence{SampleEndpoints: make([]string, 1000), SampleUsers: []string{long}}}
	got := Trim(b)
	if len(got.Subject) > maxText+len("…") || len(got.Note) > maxText+len("…") || len(got.Evidence.SampleEndpoints) != maxSamples ||
		len(got.Evidence.SampleUsers[0]) > maxText+len("…") || len(got.BanID) > maxText {
		t.Errorf("not bounded: %d %d %d", len(got.Subject), len(got.Evidence.SampleEndpoints), len(got.BanID))
	}
	b.BanID = long + "2"
	if other := Trim(b); other.BanID == got.BanID {
		t.Error("two long ban ids trimmed alike")
	}
}

func TestSelector(t *testing.T) {
	ban := event.Ban{Action: event.ActionBan, Scope: event.ScopeIP, Reason: "credential_stuffing", Source: "detector"}
	manual := event.Ban{Action: event.ActionUnban, Scope: event.ScopeUser, Reason: "manual", Source: SourceManual}
	dry := ban
	dry.DryRun = true
	tests := []struct {
		name             string
		sel              Selector
		ban, manual, dry bool
	}{
		{"everything", Selector{}, true, true, true},
		{"bans only", Selector{Actions: []string{event.ActionBan}}, true, false, true},
		{"users only", Selector{Scopes: []string{event.ScopeUser}}, false, true, false},
		{"one scenario", Selector{Scenarios: []string{"credential_stuffing"}}, true, false, true},
		{"no manual", Selector{SkipManual: true}, true, false, true},
		{"no dry run", Selector{SkipDryRun: true}, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := []bool{tt.sel.Wants(&ban), tt.sel.Wants(&manual), tt.sel.Wants(&dry)}; got[0] != tt.ban || got[1] != tt.manual || got[2] != tt.dry {
				t.Errorf("wants %v, want %v %v %v", got, tt.ban, tt.manual, tt.dry)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	d := 30 * time.Second
	tests := []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(29, 999), 0},
		{time.Unix(30, 0), 1},
		{time.Unix(-1, 0), -1},
		{time.Unix(-30, 0), -1},
		{time.Unix(-31, 0), -2},
	}
	for _, tt := range tests {
		if got := Window(tt.t, d); got != tt.want {
			t.Errorf("Window(%v) = %d, want %d", tt.t.Unix(), got, tt.want)
		}
		start, end := WindowBounds(tt.want, d)
		if tt.t.Before(start) || !tt.t.Before(end) {
			t.Errorf("%v is not in [%v, %v)", tt.t, start, end)
		}
	}
}

// The JSON body carries the key, the counts and the examples as ban
// messages; the Slack body escapes what a subject could use to mention or
// link.
func TestBodies(t *testing.T) {
	bans := stuffing(12, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	bans[0].Subject = "<!channel> & `x`"
	d := build(bans, 3)[0]
	raw, err := Body(&d, FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Key      string            `json:"idempotency_key"`
		Count    int               `json:"count"`
		Omitted  int               `json:"examples_omitted"`
		Scenario string            `json:"scenario"`
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Key != d.Key || got.Count != 12 || got.Omitted != 9 || got.Scenario != "credential_stuffing" || len(got.Examples) != 3 {
		t.Fatalf("json body %s", raw)
	}
	for _, ex := range got.Examples {
		if _, err := event.DecodeBan(ex); err != nil {
			t.Errorf("example is not a ban message: %v", err)
		}
	}

	d.Examples[0].Subject = bans[0].Subject
	raw, err = Body(&d, FormatSlack)
	if err != nil {
		t.Fatal(err)
	}
	var slack struct {
		Text   string `json:"text"`
		Blocks []struct {
			Text struct{ Text string } `json:"text"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &slack); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(slack.Text, "12 ip bans for credential_stuffing") || len(slack.Blocks) != 2 {
		t.Fatalf("slack body %s", raw)
	}
	if ex := slack.Blocks[1].Text.Text; strings.Contains(ex, "<!channel>") || !strings.Contains(ex, "&lt;!channel&gt; &amp; 'x'") ||
		!strings.Contains(ex, "and 9 more") || !strings.Contains(ex, d.Key) {
		t.Errorf("slack examples %q", ex)
	}
	if _, err := Body(&d, "xml"); err == nil {
		t.Error("an unknown format was encoded")
	}
}
