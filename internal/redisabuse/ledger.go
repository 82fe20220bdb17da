package redisabuse

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/lua"
)

// recordKeep is how long (wall clock) a ledger record outlives its duration.
const recordKeep = time.Minute

// maxDurationMs bounds escalated durations so they fit a time.Duration.
const maxDurationMs = math.MaxInt64 / int64(time.Millisecond)

// Ledger is the detector's record of issued bans and warnings in Redis
// (abuse.Ledger), run by lua/detect_claim.lua on the offender's keys (the
// hash tag of Windows): P{det|…}:ban holds the current ban record and
// P{det|…}:warn:<reason> the current warning of each reason (an account
// under attack is alerted of even while it holds a warning of its own
// violations), P{det|…}:hist the bans within the escalation period. It is safe
// for concurrent use.
type Ledger struct {
	client redis.UniversalClient
	prefix string
	bans   Blacklist
	script *redis.Script
	now    func() time.Time
}

// Blacklist is where Settle writes the bans it enforces: the set the
// limiters enforce (redisfleet.Blacklist). Add never shortens a ban in
// force, and reports whether it wrote.
type Blacklist interface {
	Add(ctx context.Context, ban event.Ban) (bool, error)
}

// NewLedger returns the ledger under the key prefix (the prefix of the
// Windows). Settle writes enforced bans to bans; nil enforces nothing.
func NewLedger(client redis.UniversalClient, prefix string, bans Blacklist) *Ledger {
	return &Ledger{client: client, prefix: prefix, bans: bans, script: redis.NewScript(lua.DetectClaim()), now: time.Now}
}

// Claim records c.Ban unless an unexpired record of the offender (by event
// time: its expiry is after c.Ban.TS) covers it. A new ban lasts
// min(c.Ban.DurationS × Factor^n, Cap) where n counts the offender's bans in
// [TS−Period, TS); its DurationS is that in seconds, rounded up, and
// ExpiresAt is TS plus that, to the ms. A warning suppresses others for
// c.WarnFor; it has DurationS 0 and no ExpiresAt. These are the semantics of
// abusetest.MemoryLedger, except that only the offender's latest ban is
// checked for being active (the memory ledger checks all of them, which
// differs only when claims arrive out of event-time order).
func (l *Ledger) Claim(ctx context.Context, c abuse.Claim) (abuse.Claimed, error) {
	b := c.Ban
	var baseMs int64
	switch b.Action {
	case event.ActionBan:
		baseMs = b.DurationS * 1000
		if b.DurationS <= 0 || b.DurationS > maxDurationMs/1000 {
			return abuse.Claimed{}, claimError(b, fmt.Errorf("duration_s %d is out of range", b.DurationS))
		}
	case event.ActionWarn:
		baseMs = max(c.WarnFor.Milliseconds(), 0)
	default:
		return abuse.Claimed{}, claimError(b, fmt.Errorf("action %.16q is not one of ban, warn", b.Action))
	}
	if b.TS.IsZero() {
		return abuse.Claimed{}, claimError(b, fmt.Errorf("ts is required"))
	}
	data, err := event.EncodeBan(b)
	if err != nil {
		return abuse.Claimed{}, claimError(b, err)
	}
	capMs := maxDurationMs
	if c.Escalation.Cap > 0 {
		capMs = c.Escalation.Cap.Milliseconds()
	}
	tag := offenderTag(l.prefix, abuse.Offender{Scope: b.Scope, Subject: b.Subject})
	cmd := l.script.Run(ctx, l.client, []string{recordKey(tag, b), tag + ":hist"},
		b.Action, b.TS.UnixMilli(), b.BanID, string(data), baseMs, c.Escalation.Factor, capMs,
		max(c.Escalation.Period.Milliseconds(), 0), recordKeep.Milliseconds())
	out, err := parseClaim(cmd, b)
	if err != nil {
		return abuse.Claimed{}, claimError(b, err)
	}
	return out, nil
}

// parseClaim reads {status, id, json, state, dur_ms, exp_ms}. A new record
// is the claimed ban with its final duration; a held one is decoded.
func parseClaim(cmd *redis.Cmd, claimed event.Ban) (abuse.Claimed, error) {
	v, err := cmd.Result()
	if err != nil {
		return abuse.Claimed{}, err
	}
	vals, ok := v.([]any)
	if !ok || len(vals) != 6 {
		return abuse.Claimed{}, errReply
	}
	status, _ := vals[0].(string)
	data, _ := vals[2].(string)
	state, _ := vals[3].(string)
	dur, ok1 := vals[4].(int64)
	_, ok2 := vals[5].(int64)
	if !ok1 || !ok2 || (status != "new" && status != "held") {
		return abuse.Claimed{}, errReply
	}
	b := claimed
	if status == "held" {
		if b, err = event.DecodeBan([]byte(data)); err != nil {
			return abuse.Claimed{}, fmt.Errorf("held record: %w", err)
		}
	}
	if b.Action == event.ActionBan {
		b.DurationS = (dur + 999) / 1000
		b.ExpiresAt = b.TS.Add(time.Duration(dur) * time.Millisecond)
	} else {
		b.DurationS, b.ExpiresAt = 0, time.Time{}
	}
	return abuse.Claimed{Ban: b, Publish: status == "new" || state == "pending"}, nil
}

// Settle writes an enforced, unexpired ban to the blacklist (where it never
// shortens a longer ban in force, a manual one say), then marks the
// offender's record settled if it still holds ban.BanID. The blacklist comes
// first: a crash in between leaves the record pending, so the next claim
// publishes and settles again rather than never enforcing.
func (l *Ledger) Settle(ctx context.Context, ban event.Ban, enforce bool) error {
	if ban.Action != event.ActionBan && ban.Action != event.ActionWarn {
		return fmt.Errorf("redis settle %s: action %.16q is not one of ban, warn", ban.BanID, ban.Action)
	}
	if err := validateScope(ban.Scope); err != nil {
		return fmt.Errorf("redis settle %s: %w", ban.BanID, err)
	}
	if enforce && ban.Action == event.ActionBan && l.bans != nil && ban.ExpiresAt.After(l.now()) {
		if _, err := l.bans.Add(ctx, ban); err != nil {
			return fmt.Errorf("redis settle %s: %w", ban.BanID, err)
		}
	}
	tag := offenderTag(l.prefix, abuse.Offender{Scope: ban.Scope, Subject: ban.Subject})
	err := l.script.Run(ctx, l.client, []string{recordKey(tag, ban), tag + ":hist"}, "settle", ban.BanID).Err()
	if err != nil {
		return fmt.Errorf("redis settle %s: %w", ban.BanID, err)
	}
	return nil
}

// recordKey is the key of the offender's current record of b's kind: its
// ban, or its warning of b's reason.
func recordKey(tag string, b event.Ban) string {
	if b.Action == event.ActionWarn {
		return tag + ":" + event.ActionWarn + ":" + b.Reason
	}
	return tag + ":" + b.Action
}

func claimError(b event.Ban, err error) error {
	return fmt.Errorf("redis claim %s %s: %w", b.Action, b.BanID, err)
}
