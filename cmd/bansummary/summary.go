package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/event"
)

// scenario is what a ban message is about: its action, scope and reason
// (a ban of an ip for credential_stuffing, a warning about a user for
// account_attack).
type scenario struct{ action, scope, reason string }

// group is the messages of one scenario: how many, and the earliest (by
// its ts) as its example.
type group struct {
	scenario
	count   int
	example event.Ban
}

// summary is the messages of the ban topic by scenario, in the order of
// their earliest messages: a topic's partitions are read in no order of
// time, and the story is.
type summary struct {
	groups     []*group
	messages   int
	unreadable int // values that are no ban message
}

// summarize reads JSON values of the ban topic from r, one after another
// (kcat's '%s\n'), and groups them by scenario. A value that is JSON but
// no ban message is counted as unreadable; an input that is not JSON at
// all stops it.
func summarize(r io.Reader) (*summary, error) {
	s := &summary{}
	index := map[scenario]*group{}
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				slices.SortStableFunc(s.groups, func(a, b *group) int { return a.example.TS.Compare(b.example.TS) })
				return s, nil
			}
			return s, fmt.Errorf("message %d: %w", s.messages+s.unreadable+1, err)
		}
		b, err := event.DecodeBan(raw)
		if err != nil {
			s.unreadable++
			continue
		}
		s.messages++
		k := scenario{b.Action, b.Scope, b.Reason}
		g := index[k]
		if g == nil {
			g = &group{scenario: k, example: b}
			index[k] = g
			s.groups = append(s.groups, g)
		}
		if b.TS.Before(g.example.TS) {
			g.example = b
		}
		g.count++
	}
}

// write prints the summary: a line per scenario with its count and an
// example (subject, duration, what was counted, the evidence's samples).
func (s *summary) write(w io.Writer) {
	shown, rest := s.groups, []*group(nil)
	if len(shown) > maxScenarios {
		shown, rest = shown[:maxScenarios], shown[maxScenarios:]
	}
	width := 0
	for _, g := range shown {
		width = max(width, len(g.name()))
	}
	for _, g := range shown {
		fmt.Fprintf(w, "%5d  %-*s  e.g. %s\n", g.count, width, g.name(), describe(&g.example))
	}
	if len(rest) > 0 {
		n := 0
		for _, g := range rest {
			n += g.count
		}
		fmt.Fprintf(w, "%5d  in %d more scenarios\n", n, len(rest))
	}
	fmt.Fprintf(w, "%5d  in all\n", s.messages)
	if s.unreadable > 0 {
		fmt.Fprintf(w, "%5d  values that are no ban message, besides\n", s.unreadable)
	}
}

func (g *group) name() string { return shown(g.action) + " " + shown(g.scope) + " " + shown(g.reason) }

// describe says what one ban message is about, in a line: its subject,
// for how long, the count against the threshold in its window and the
// samples of its evidence.
func describe(b *event.Ban) string {
	var sb strings.Builder
	sb.WriteString(shown(b.Subject))
	switch {
	case b.Action == event.ActionBan && b.DurationS > 0:
		fmt.Fprintf(&sb, " for %s", seconds(b.DurationS))
	case b.Action == event.ActionBan:
		sb.WriteString(" until lifted")
	}
	if b.DryRun {
		sb.WriteString(" (dry run)")
	}
	if b.Threshold > 0 || b.Count > 0 {
		fmt.Fprintf(&sb, ": count %d, threshold %d", b.Count, b.Threshold)
		if b.WindowS > 0 {
			fmt.Fprintf(&sb, " in %s", seconds(b.WindowS))
		}
	}
	for _, s := range []struct {
		name    string
		samples []string
	}{
		{"endpoints", b.Evidence.SampleEndpoints},
		{"users", b.Evidence.SampleUsers},
		{"sources", b.Evidence.SampleSources},
		{"spared", b.Evidence.SparedSources},
	} {
		if len(s.samples) > 0 {
			fmt.Fprintf(&sb, "; %s %s", s.name, samples(s.samples, 3))
		}
	}
	if b.Note != "" {
		fmt.Fprintf(&sb, "; note %q", cut(b.Note))
	}
	return sb.String()
}

// samples lists the first n of ss, and how many more there are.
func samples(ss []string, n int) string {
	shownSS := make([]string, 0, min(len(ss), n))
	for _, s := range ss[:min(len(ss), n)] {
		shownSS = append(shownSS, shown(s))
	}
	if len(ss) <= n {
		return strings.Join(shownSS, ", ")
	}
	return fmt.Sprintf("%s (+%d)", strings.Join(shownSS, ", "), len(ss)-n)
}

// maxScenarios bounds the scenarios printed one by one: whoever may write
// to the ban topic chooses a message's reason, and so the scenarios.
const maxScenarios = 20

// maxShown bounds the bytes of one string of a message that are printed.
const maxShown = 64

// shown is s, a string of a ban message, as printed: cut to maxShown bytes,
// and quoted (escaped) when it holds a character that is not printable.
// Whoever may write to the ban topic writes these strings, and the summary
// goes to a terminal: an escape sequence must not reach it as it is.
func shown(s string) string {
	s = cut(s)
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// cut cuts s to maxShown bytes, never inside a character, and marks the cut.
func cut(s string) string {
	if len(s) <= maxShown {
		return s
	}
	n := maxShown
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// seconds prints a whole number of seconds as a short duration: 1h, 10m,
// 90s is 1m30s, 1h30m.
func seconds(s int64) string {
	if s <= 0 {
		return "0s"
	}
	var sb strings.Builder
	for _, u := range []struct {
		n    int64
		name string
	}{{3600, "h"}, {60, "m"}, {1, "s"}} {
		if s >= u.n {
			fmt.Fprintf(&sb, "%d%s", s/u.n, u.name)
			s %= u.n
		}
	}
	return sb.String()
}
