// Package bantest checks what reaches the ban topic, for the tests of the
// services that publish bans (the detector, the admin API).
package bantest

import (
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/eventschema"
)

// Kinds checks each message of the ban topic against s (the ban
// schema) and its key against its ban's, and counts the kinds of ban the
// messages hold: "SOURCE ACTION SCOPE" (say "admin ban ip"), "SOURCE
// ACTION ipv6 prefix" for a prefix subject, "reason REASON" and "dry run".
func Kinds(tb testing.TB, s *eventschema.Schema, msgs []kafka.Message) map[string]int {
	tb.Helper()
	seen := map[string]int{}
	for _, m := range msgs {
		if err := s.Validate(m.Value); err != nil {
			tb.Errorf("%s\n%v", m.Value, err)
		}
		b, err := event.DecodeBan(m.Value)
		if err != nil {
			tb.Fatal(err)
		}
		if string(m.Key) != b.Key() {
			tb.Errorf("key %q, want %q", m.Key, b.Key())
		}
		seen[b.Source+" "+b.Action+" "+b.Scope]++
		if strings.Contains(b.Subject, "/") {
			seen[b.Source+" "+b.Action+" ipv6 prefix"]++
		}
		seen["reason "+b.Reason]++
		if b.DryRun {
			seen["dry run"]++
		}
	}
	return seen
}
