package digest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Formats of a receiver's body.
const (
	FormatJSON  = "json"
	FormatSlack = "slack"
)

// Body returns d encoded in format (FormatJSON or FormatSlack).
func Body(d *Digest, format string) ([]byte, error) {
	switch format {
	case FormatJSON:
		return JSON(d)
	case FormatSlack:
		return Slack(d)
	}
	return nil, fmt.Errorf("digest: unknown format %q", format)
}

// jsonDigest is the generic JSON body.
type jsonDigest struct {
	IdempotencyKey string            `json:"idempotency_key"`
	Receiver       string            `json:"receiver"`
	Action         string            `json:"action"`
	Scope          string            `json:"scope"`
	Scenario       string            `json:"scenario"`
	Count          int               `json:"count"`
	DryRun         int               `json:"dry_run_count"`
	FirstTS        string            `json:"first_ts"`
	LastTS         string            `json:"last_ts"`
	WindowStart    string            `json:"window_start"`
	WindowEnd      string            `json:"window_end"`
	Examples       []json.RawMessage `json:"examples"`
	Omitted        int               `json:"examples_omitted"`
	Others         []jsonGroup       `json:"other_groups,omitempty"`
	OthersOmitted  int               `json:"other_groups_omitted,omitempty"`
}

// jsonGroup is one group a digest of the rest covers.
type jsonGroup struct {
	Action   string `json:"action"`
	Scope    string `json:"scope"`
	Scenario string `json:"scenario"`
	Count    int    `json:"count"`
}

// JSON is the generic body: the digest's counts and bounds, and each
// example as a message of the bans topic (docs/events.md).
func JSON(d *Digest) ([]byte, error) {
	out := jsonDigest{IdempotencyKey: d.Key, Receiver: d.Receiver, Action: d.Action, Scope: d.Scope, Scenario: d.Scenario,
		Count: d.Count, DryRun: d.DryRun, FirstTS: stamp(d.FirstTS), LastTS: stamp(d.LastTS),
		WindowStart: stamp(d.WindowStart), WindowEnd: stamp(d.WindowEnd),
		Examples: make([]json.RawMessage, 0, len(d.Examples)), Omitted: d.Count - len(d.Examples), OthersOmitted: d.OthersOmitted}
	for _, g := range d.Others {
		out.Others = append(out.Others, jsonGroup(g))
	}
	for _, b := range d.Examples {
		raw, err := event.EncodeBan(b)
		if err != nil {
			return nil, err
		}
		out.Examples = append(out.Examples, raw)
	}
	return json.Marshal(out)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

type slackBody struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type string     `json:"type"`
	Text *slackText `json:"text,omitempty"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Slack is a body for a Slack incoming webhook (or any receiver that takes
// its shape): a one-line text and blocks with the examples. Every text of
// a ban is escaped, so a subject cannot mention or link.
func Slack(d *Digest) ([]byte, error) {
	text := Summary(d)
	var ex strings.Builder
	for _, b := range d.Examples {
		fmt.Fprintf(&ex, "• %s %s", codeSpan(b.Subject), detail(&b))
		ex.WriteByte('\n')
	}
	if n := d.Count - len(d.Examples); n > 0 {
		fmt.Fprintf(&ex, "…and %d more\n", n)
	}
	for _, g := range d.Others {
		fmt.Fprintf(&ex, "• %d %s %s for %s\n", g.Count, slackEscape(g.Scope), slackEscape(g.Action), codeSpan(g.Scenario))
	}
	if d.OthersOmitted > 0 {
		fmt.Fprintf(&ex, "…and %d more scenarios\n", d.OthersOmitted)
	}
	ex.WriteString("idempotency key `" + d.Key + "`")
	body := slackBody{Text: text, Blocks: []slackBlock{
		{Type: "section", Text: &slackText{Type: "mrkdwn", Text: "*" + text + "*"}},
		{Type: "section", Text: &slackText{Type: "mrkdwn", Text: ex.String()}},
	}}
	return json.Marshal(body)
}

// Summary is the digest in one line, e.g. "ratewarden: 200 ip bans for
// credential_stuffing between 10:00:00 and 10:00:30 UTC" (a digest of the
// rest: "... 2991 mixed messages for 2991 other scenarios ...").
func Summary(d *Digest) string {
	noun := map[string]string{event.ActionBan: "ban", event.ActionUnban: "unban", event.ActionWarn: "warning"}[d.Action]
	if noun == "" {
		noun = "message"
	}
	if d.Count != 1 {
		noun += "s"
	}
	scenario := slackEscape(d.Scenario)
	if d.Others != nil {
		scenario = fmt.Sprintf("%d other scenarios", len(d.Others)+d.OthersOmitted)
	}
	s := fmt.Sprintf("ratewarden: %d %s %s for %s between %s and %s UTC", d.Count, d.Scope, noun, scenario,
		d.FirstTS.UTC().Format(time.TimeOnly), d.LastTS.UTC().Format(time.TimeOnly))
	if d.DryRun > 0 {
		s += fmt.Sprintf(" (%d in dry run, not enforced)", d.DryRun)
	}
	return s
}

// detail is what an example line of the Slack body says of b besides its
// subject, its texts escaped.
func detail(b *event.Ban) string {
	var parts []string
	if b.Count > 0 {
		parts = append(parts, fmt.Sprintf("%d events (threshold %d in %ds)", b.Count, b.Threshold, b.WindowS))
	}
	if b.DurationS > 0 {
		parts = append(parts, "for "+(time.Duration(b.DurationS)*time.Second).String())
	}
	if len(b.Evidence.SampleEndpoints) > 0 {
		spans := make([]string, len(b.Evidence.SampleEndpoints))
		for i, e := range b.Evidence.SampleEndpoints {
			spans[i] = codeSpan(e)
		}
		parts = append(parts, "on "+strings.Join(spans, ", "))
	}
	if b.Note != "" {
		parts = append(parts, "note: "+codeSpan(b.Note))
	}
	return strings.Join(parts, "; ")
}

// codeSpan puts a text of a ban (anyone who may write to the bans topic
// chose it) in a code span, where Slack neither formats nor links it.
func codeSpan(s string) string { return "`" + slackEscape(s) + "`" }

// slackEscape escapes what Slack's mrkdwn reads as markup (&, <, >) and
// the backquote, which would end a code span, and replaces with a space
// every character that could start a line of its own or reorder the text
// around it (control characters, line and paragraph separators, bidi
// controls): a text of a ban stays on its example's line.
func slackEscape(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control) {
			return ' '
		}
		return r
	}, s)
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "'").Replace(s)
}
