package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// sampleBans returns the ban topic of a demo run in short, as kcat prints
// it: a warning, a scan ban, two stuffing bans, an account attack's ban
// and its alert about the account, a manual ban; the scan ban and a
// stuffing ban are read before earlier ones, as from another partition.
func sampleBans(t *testing.T) string {
	t.Helper()
	ts := time.Date(2026, 11, 29, 3, 8, 0, 0, time.UTC)
	bans := []event.Ban{
		{BanID: "2", TS: ts.Add(1 * time.Second), Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.1", Reason: "scan",
			Count: 50, Threshold: 50, WindowS: 10, DurationS: 3600, ExpiresAt: ts.Add(time.Hour), Source: "detector",
			Evidence: event.Evidence{SampleEndpoints: []string{"/.aws/credentials", "/a.php", "/b.php", "/c.php", "/d.php"}}},
		{BanID: "1", TS: ts, Action: event.ActionWarn, Scope: event.ScopeIP, Subject: "192.0.2.1", Reason: "violations_5m",
			Count: 20, Threshold: 20, WindowS: 300, Source: "detector",
			Evidence: event.Evidence{SampleEndpoints: []string{"/api/login"}}},
		{BanID: "3", TS: ts.Add(3 * time.Second), Action: event.ActionBan, Scope: event.ScopeIP, Subject: "198.18.0.139", Reason: "credential_stuffing",
			Count: 3, Threshold: 2, WindowS: 600, DurationS: 3600, ExpiresAt: ts.Add(time.Hour), Source: "detector",
			Evidence: event.Evidence{SampleUsers: []string{"user-416", "user-415", "user-414"}}},
		{BanID: "4", TS: ts.Add(2 * time.Second), Action: event.ActionBan, Scope: event.ScopeIP, Subject: "198.18.0.1", Reason: "credential_stuffing",
			Count: 3, Threshold: 2, WindowS: 600, DurationS: 3600, ExpiresAt: ts.Add(time.Hour), Source: "detector",
			Evidence: event.Evidence{SampleUsers: []string{"user-2", "user-1", "user-0"}}},
		{BanID: "5", TS: ts.Add(4 * time.Second), Action: event.ActionBan, Scope: event.ScopeIP, Subject: "198.19.0.30", Reason: "account_attack",
			Count: 11, Threshold: 10, WindowS: 600, DurationS: 5400, ExpiresAt: ts.Add(90 * time.Minute), Source: "detector", DryRun: true,
			Evidence: event.Evidence{SampleUsers: []string{"victim"}}},
		{BanID: "6", TS: ts.Add(5 * time.Second), Action: event.ActionWarn, Scope: event.ScopeUser, Subject: "victim", Reason: "account_attack",
			Count: 11, Threshold: 10, WindowS: 600, Source: "detector",
			Evidence: event.Evidence{SampleSources: []string{"198.19.0.30", "198.19.0.2"}, SparedSources: []string{"100.80.0.1"}}},
		{BanID: "7", TS: ts.Add(6 * time.Second), Action: event.ActionBan, Scope: event.ScopeUser, Subject: "mallory", Reason: "manual",
			Source: "admin", Note: "by hand"},
	}
	var sb strings.Builder
	for _, b := range bans {
		v, err := event.EncodeBan(b)
		if err != nil {
			t.Fatal(err)
		}
		sb.Write(v)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func TestSummary(t *testing.T) {
	input := sampleBans(t) + `{"ban_id":"","action":"ban"}` + "\n"
	var out, errOut bytes.Buffer
	if err := run(nil, strings.NewReader(input), &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	want := `    1  warn ip violations_5m       e.g. 192.0.2.1: count 20, threshold 20 in 5m; endpoints /api/login
    1  ban ip scan                 e.g. 203.0.113.1 for 1h: count 50, threshold 50 in 10s; endpoints /.aws/credentials, /a.php, /b.php (+2)
    2  ban ip credential_stuffing  e.g. 198.18.0.1 for 1h: count 3, threshold 2 in 10m; users user-2, user-1, user-0
    1  ban ip account_attack       e.g. 198.19.0.30 for 1h30m (dry run): count 11, threshold 10 in 10m; users victim
    1  warn user account_attack    e.g. victim: count 11, threshold 10 in 10m; sources 198.19.0.30, 198.19.0.2; spared 100.80.0.1
    1  ban user manual             e.g. mallory until lifted; note "by hand"
    7  in all
    1  values that are no ban message, besides
`
	if out.String() != want {
		t.Fatalf("summary:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A file that is not JSON at all (kcat's raw format by mistake) is an
// error, not an empty summary.
func TestSummaryOfNoJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(nil, strings.NewReader(">>> ban on ratelimit.bans: {}\n"), &out, &errOut)
	if err == nil || out.Len() != 0 {
		t.Fatalf("err %v, output %q: want an error and nothing printed", err, out.String())
	}
}

func TestSummaryOfNothing(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(nil, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != "    0  in all\n" {
		t.Fatalf("summary of no message: %q", out.String())
	}
}

// Anyone who may write to the ban topic writes what the summary prints on
// a terminal: a subject, reason or sample holding a terminal's escape
// sequences is printed quoted, escaped, and a long one is cut.
func TestSummaryEscapesWhatItPrints(t *testing.T) {
	ts := time.Date(2026, 11, 29, 3, 8, 0, 0, time.UTC)
	esc := "\x1b]0;owned\a\x1b[2J"
	b := event.Ban{BanID: "1", TS: ts, Action: event.ActionBan, Scope: event.ScopeUser, Subject: "u" + esc,
		Reason: "scan" + esc + strings.Repeat("r", 5000), Source: "detector", Note: strings.Repeat("n", 5000),
		Evidence: event.Evidence{SampleEndpoints: []string{"/a" + esc, "/b\u202e"}, SampleUsers: []string{strings.Repeat("x", 5000)}}}
	v, err := event.EncodeBan(b)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(nil, bytes.NewReader(v), &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	got := out.String()
	for _, r := range got {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Fatalf("printed %q, which holds %U", got, r)
		}
	}
	if !strings.Contains(got, `"u\x1b]0;owned\a\x1b[2J"`) || !strings.Contains(got, `"/b\u202e"`) {
		t.Errorf("subject or sample not shown escaped: %q", got)
	}
	if len(got) > 1000 {
		t.Errorf("printed %d bytes for one message: %.300q", len(got), got)
	}
}

// Messages of many reasons (anyone who may write to the ban topic chooses
// one) print maxScenarios lines, the rest counted in one: the summary
// stays a screen, whatever the topic holds.
func TestSummaryBoundsItsScenarios(t *testing.T) {
	ts := time.Date(2026, 11, 29, 3, 8, 0, 0, time.UTC)
	var in bytes.Buffer
	for i := range 1000 {
		v, err := event.EncodeBan(event.Ban{BanID: strconv.Itoa(i), TS: ts.Add(time.Duration(i) * time.Second), Action: event.ActionBan,
			Scope: event.ScopeIP, Subject: "192.0.2.1", Reason: "r" + strconv.Itoa(i), Source: "detector"})
		if err != nil {
			t.Fatal(err)
		}
		in.Write(v)
		in.WriteByte('\n')
	}
	var out, errOut bytes.Buffer
	if err := run(nil, &in, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != maxScenarios+2 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), maxScenarios+2, out.String())
	}
	if want := fmt.Sprintf("  %d  in %d more scenarios", 1000-maxScenarios, 1000-maxScenarios); lines[maxScenarios] != want {
		t.Errorf("line %q, want %q", lines[maxScenarios], want)
	}
	if want := " 1000  in all"; lines[maxScenarios+1] != want {
		t.Errorf("line %q, want %q", lines[maxScenarios+1], want)
	}
}
