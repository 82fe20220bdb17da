package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// Ban actions and scopes.
const (
	ActionBan   = "ban"
	ActionUnban = "unban"
	ActionWarn  = "warn"

	ScopeIP   = "ip"
	ScopeUser = "user"
)

// Ban is one message of ratelimit.bans: a ban, an unban or a warning.
// The message key is Key() ("scope:subject"). Zero times (ExpiresAt for an
// unban or a warning, evidence bounds when unknown) are encoded as null.
type Ban struct {
	BanID     string
	TS        time.Time
	Action    string
	Scope     string
	Subject   string
	Reason    string
	Count     int64
	Threshold int64
	WindowS   int64
	DurationS int64
	ExpiresAt time.Time
	Source    string
	DryRun    bool
	Evidence  Evidence
	// Note is the operator's free text on a manual ban or unban (optional;
	// an extension of the contract's fields).
	Note string
	// Actor is who banned or lifted by hand: the admin API's caller as it
	// declared itself (X-Actor), the console's user (optional; an
	// extension of the contract's fields).
	Actor string
}

// BanChange is a change of the shared blacklist as its subscribers (the
// limiters) learn it: a ban of Subject in Scope until ExpiresAt, or the
// lifting of one.
type BanChange struct {
	Action    string // ActionBan or ActionUnban
	Scope     string
	Subject   string
	ExpiresAt time.Time // zero for an unban
}

// Evidence is what a ban was decided on.
type Evidence struct {
	FirstTS         time.Time
	LastTS          time.Time
	SampleEndpoints []string
	// SampleUsers and SampleSources are the user ids and the sources
	// (client IPs, IPv6 prefixes) of the outcome scenarios' evidence;
	// SparedSources, of an account attack, the sources that failed on the
	// account but were not banned, as they succeeded on it (its owner's).
	// Each is omitted from the message when empty.
	SampleUsers   []string
	SampleSources []string
	SparedSources []string
}

// Key is the Kafka message key of the ban: "scope:subject".
func (b *Ban) Key() string { return b.Scope + ":" + b.Subject }

type banWire struct {
	BanID     string       `json:"ban_id"`
	TS        string       `json:"ts"`
	Action    string       `json:"action"`
	Scope     string       `json:"scope"`
	Subject   string       `json:"subject"`
	Reason    string       `json:"reason"`
	Count     int64        `json:"count"`
	Threshold int64        `json:"threshold"`
	WindowS   int64        `json:"window_s"`
	DurationS int64        `json:"duration_s"`
	ExpiresAt *string      `json:"expires_at"`
	Source    string       `json:"source"`
	DryRun    bool         `json:"dry_run"`
	Evidence  evidenceWire `json:"evidence"`
	Note      string       `json:"note,omitempty"`
	Actor     string       `json:"actor,omitempty"`
}

type evidenceWire struct {
	FirstTS         *string  `json:"first_ts"`
	LastTS          *string  `json:"last_ts"`
	SampleEndpoints []string `json:"sample_endpoints"`
	SampleUsers     []string `json:"sample_users,omitempty"`
	SampleSources   []string `json:"sample_sources,omitempty"`
	SparedSources   []string `json:"spared_sources,omitempty"`
}

// EncodeBan validates b and returns its JSON message value.
func EncodeBan(b Ban) ([]byte, error) {
	if err := b.validate(); err != nil {
		return nil, fmt.Errorf("encode ban: %w", err)
	}
	samples := b.Evidence.SampleEndpoints
	if samples == nil {
		samples = []string{}
	}
	return json.Marshal(banWire{
		BanID: b.BanID, TS: formatTime(b.TS), Action: b.Action, Scope: b.Scope, Subject: b.Subject,
		Reason: b.Reason, Count: b.Count, Threshold: b.Threshold, WindowS: b.WindowS, DurationS: b.DurationS,
		ExpiresAt: optionalTime(b.ExpiresAt), Source: b.Source, DryRun: b.DryRun, Note: b.Note, Actor: b.Actor,
		Evidence: evidenceWire{
			FirstTS: optionalTime(b.Evidence.FirstTS), LastTS: optionalTime(b.Evidence.LastTS), SampleEndpoints: samples,
			SampleUsers: b.Evidence.SampleUsers, SampleSources: b.Evidence.SampleSources, SparedSources: b.Evidence.SparedSources,
		},
	})
}

// DecodeBan parses and validates one ratelimit.bans message. Unknown fields
// are ignored.
func DecodeBan(data []byte) (Ban, error) {
	var w banWire
	if err := json.Unmarshal(data, &w); err != nil {
		return Ban{}, fmt.Errorf("decode ban: %w", err)
	}
	if w.TS == "" {
		return Ban{}, fmt.Errorf("decode ban: field %q is required", "ts")
	}
	b := Ban{
		BanID: w.BanID, Action: w.Action, Scope: w.Scope, Subject: w.Subject, Reason: w.Reason,
		Count: w.Count, Threshold: w.Threshold, WindowS: w.WindowS, DurationS: w.DurationS,
		Source: w.Source, DryRun: w.DryRun, Note: w.Note, Actor: w.Actor,
		Evidence: Evidence{SampleEndpoints: w.Evidence.SampleEndpoints,
			SampleUsers: w.Evidence.SampleUsers, SampleSources: w.Evidence.SampleSources, SparedSources: w.Evidence.SparedSources},
	}
	var err error
	if b.TS, err = parseTime("ts", w.TS); err != nil {
		return Ban{}, fmt.Errorf("decode ban: %w", err)
	}
	for _, f := range [...]struct {
		name string
		in   *string
		out  *time.Time
	}{
		{"expires_at", w.ExpiresAt, &b.ExpiresAt},
		{"evidence.first_ts", w.Evidence.FirstTS, &b.Evidence.FirstTS},
		{"evidence.last_ts", w.Evidence.LastTS, &b.Evidence.LastTS},
	} {
		if f.in == nil || *f.in == "" {
			continue
		}
		if *f.out, err = parseTime(f.name, *f.in); err != nil {
			return Ban{}, fmt.Errorf("decode ban: %w", err)
		}
	}
	if err := b.validate(); err != nil {
		return Ban{}, fmt.Errorf("decode ban: %w", err)
	}
	return b, nil
}

func (b *Ban) validate() error {
	switch {
	case b.BanID == "":
		return fmt.Errorf("field %q is required", "ban_id")
	case b.Action != ActionBan && b.Action != ActionUnban && b.Action != ActionWarn:
		return fmt.Errorf("field \"action\": %q is not one of ban, unban, warn", b.Action)
	case b.Scope != ScopeIP && b.Scope != ScopeUser:
		return fmt.Errorf("field \"scope\": %q is not one of ip, user", b.Scope)
	case b.Subject == "":
		return fmt.Errorf("field %q is required", "subject")
	}
	return nil
}

func optionalTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}
