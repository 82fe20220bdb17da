package pgstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

// maxIndexedText caps text that goes into a btree index (user_id, rule_id,
// ban_id, scope, subject): Postgres rejects an index entry over ~2.7 kB
// ("index row size exceeds btree maximum"), which would fail a whole batch.
const maxIndexedText = 1024

// The range of timestamptz: 4714-11-24 BC to 294276-12-31 AD (Go numbers
// years astronomically: 4714 BC is year -4713).
var (
	minTimestamp = time.Date(-4713, time.November, 24, 0, 0, 0, 0, time.UTC)
	maxTimestamp = time.Date(294277, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// ValidateViolation reports everything about v that Postgres would reject,
// so one bad row can never fail the batch it travels with: event_id must be
// a UUID, IP an address (inet, without zone), text valid UTF-8 without NUL
// bytes, user_id and rule_id at most 1 KiB, occurred_at set and within the
// range of timestamptz. Write relies on it: the archiver sends rows that
// fail it to the dead-letter table instead.
func (*Store) ValidateViolation(v archiver.Violation) error { return validateViolation(v) }

// ValidateBan reports everything about b that Postgres would reject, like
// ValidateViolation: ban_id non-empty, text valid UTF-8 without NUL bytes
// (also in the evidence, stored as jsonb), ban_id, scope and subject at most
// 1 KiB, ts set, and every time within the range of timestamptz.
func (*Store) ValidateBan(b event.Ban) error { return validateBan(b) }

// ValidateOutcome reports everything about o that Postgres would reject,
// like ValidateViolation: event_id a UUID, IP an address without zone, text
// valid UTF-8 without NUL bytes, user_id at most 1 KiB, ts set and within
// the range of timestamptz, status within smallint.
func (*Store) ValidateOutcome(o event.Outcome) error { return validateOutcome(o) }

func validateViolation(v archiver.Violation) error {
	if _, err := parseUUID(v.EventID); err != nil {
		return fmt.Errorf("field \"event_id\": %w", err)
	}
	if _, err := parseIP(v.IP); err != nil {
		return fmt.Errorf("field \"ip\": %w", err)
	}
	if err := checkTime(v.OccurredAt); err != nil {
		return fmt.Errorf("field \"ts\": %w", err)
	}
	for _, f := range [...]struct {
		name, value string
		max         int
	}{
		{"user_id", v.UserID, maxIndexedText}, {"rule_id", v.RuleID, maxIndexedText},
		{"endpoint", v.Endpoint, 0}, {"method", v.Method, 0}, {"tier", v.Tier, 0},
		{"algorithm", v.Algorithm, 0}, {"reason", v.Reason, 0}, {"instance", v.Instance, 0},
		{"domain", v.Domain, 0}, {"descriptors", v.Descriptors, 0},
	} {
		if err := checkText(f.value, f.max); err != nil {
			return fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	return nil
}

func validateOutcome(o event.Outcome) error {
	if _, err := parseUUID(o.EventID); err != nil {
		return fmt.Errorf("field \"event_id\": %w", err)
	}
	if _, err := parseIP(o.IP); err != nil {
		return fmt.Errorf("field \"ip\": %w", err)
	}
	if err := checkTime(o.TS); err != nil {
		return fmt.Errorf("field \"ts\": %w", err)
	}
	if o.Status < math.MinInt16 || o.Status > math.MaxInt16 {
		return fmt.Errorf("field \"status\": %d is outside the range of smallint", o.Status)
	}
	for _, f := range [...]struct {
		name, value string
		max         int
	}{
		{"user_id", o.UserID, maxIndexedText}, {"endpoint", o.Endpoint, 0}, {"method", o.Method, 0},
		{"tier", o.Tier, 0}, {"instance", o.Instance, 0},
	} {
		if err := checkText(f.value, f.max); err != nil {
			return fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	return nil
}

func validateBan(b event.Ban) error {
	if b.BanID == "" {
		return fmt.Errorf("field %q is required", "ban_id")
	}
	if err := checkTime(b.TS); err != nil {
		return fmt.Errorf("field \"ts\": %w", err)
	}
	for _, f := range [...]struct {
		name string
		t    time.Time
	}{{"expires_at", b.ExpiresAt}, {"evidence.first_ts", b.Evidence.FirstTS}, {"evidence.last_ts", b.Evidence.LastTS}} {
		if !f.t.IsZero() { // zero is stored as NULL
			if err := checkTime(f.t); err != nil {
				return fmt.Errorf("field %q: %w", f.name, err)
			}
		}
	}
	for _, f := range [...]struct {
		name, value string
		max         int
	}{
		{"ban_id", b.BanID, maxIndexedText}, {"scope", b.Scope, maxIndexedText}, {"subject", b.Subject, maxIndexedText},
		{"action", b.Action, 0}, {"reason", b.Reason, 0}, {"source", b.Source, 0}, {"note", b.Note, 0}, {"actor", b.Actor, 0},
	} {
		if err := checkText(f.value, f.max); err != nil {
			return fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	for _, samples := range [...]struct {
		name string
		list []string
	}{{"sample_endpoints", b.Evidence.SampleEndpoints}, {"sample_users", b.Evidence.SampleUsers}, {"sample_sources", b.Evidence.SampleSources},
		{"spared_sources", b.Evidence.SparedSources}} {
		for i, e := range samples.list {
			if err := checkText(e, 0); err != nil {
				return fmt.Errorf("field \"evidence.%s[%d]\": %w", samples.name, i, err)
			}
		}
	}
	return nil
}

func checkText(s string, maxLen int) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL byte")
	case maxLen > 0 && len(s) > maxLen:
		return fmt.Errorf("%d bytes long, over the limit of %d", len(s), maxLen)
	}
	return nil
}

func checkTime(t time.Time) error {
	switch {
	case t.IsZero():
		return errors.New("is required")
	case t.Before(minTimestamp) || !t.Before(maxTimestamp):
		return fmt.Errorf("%s is outside the range of timestamptz", t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// parseIP parses an address as Postgres inet stores it: no zone, no prefix
// length.
func parseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has a zone, which inet cannot store", s)
	}
	return a, nil
}

// parseUUID parses the canonical form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
// (either case), the form the limiter writes.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	out := u[:]
	for _, group := range [5]string{s[:8], s[9:13], s[14:18], s[19:23], s[24:]} {
		n, err := hex.Decode(out, []byte(group))
		if err != nil {
			return u, fmt.Errorf("%q is not a UUID", s)
		}
		out = out[n:]
	}
	return u, nil
}
