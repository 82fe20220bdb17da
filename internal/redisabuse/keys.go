package redisabuse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// errReply means a script answered something other than its documented
// reply.
var errReply = errors.New("unexpected script reply")

// offenderTag is the common part of an offender's keys, its hash tag
// included: P{det|<scope>|<first 32 hex digits of SHA-256(subject)>}.
func offenderTag(prefix string, o abuse.Offender) string {
	sum := sha256.Sum256([]byte(o.Subject))
	return prefix + "{det|" + o.Scope + "|" + hex.EncodeToString(sum[:16]) + "}"
}

// BanRecordKey is the key, under prefix, of the ledger's current ban
// record of an offender: while it holds a ban in force, Claim answers that
// ban rather than issue another.
func BanRecordKey(prefix, scope, subject string) string {
	return offenderTag(prefix, abuse.Offender{Scope: scope, Subject: subject}) + ":" + event.ActionBan
}

// liftedSuffix names an offender's key holding the instant (ms) of its
// last lifted ban: Windows counts nothing at or before it.
const liftedSuffix = ":lifted"

// liftedKeep is how long the instant of a lift is kept: far longer than
// any event is late, so the lifted ban's evidence never comes back.
const liftedKeep = 7 * 24 * time.Hour

// Lift does in the detector's state what an unban
// (redisfleet.Blacklist.Remove) needs, in one round trip: it deletes the
// ledger's ban record of the offender, so the detector may ban it again,
// and marks the instant of the lift, so that its violations and endpoints
// up to at (the evidence of the lifted ban, however late its events
// arrive) never count again and it is banned again only for what it does
// after the lift, not at its next violation. The escalation history and
// the distinct sets stay.
//
// The layout of the detector's keys is known here alone, beside the
// scripts that read them: package redisfleet calls this rather than
// repeat the layout, so the dependency runs from the fleet's state to the
// detector's and never back (Ledger reaches the blacklist through an
// interface of its own).
func Lift(ctx context.Context, client redis.Cmdable, prefix, scope, subject string, at time.Time) error {
	if err := validateScope(scope); err != nil {
		return err
	}
	tag := offenderTag(prefix, abuse.Offender{Scope: scope, Subject: subject})
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, tag+":"+event.ActionBan)
		p.Set(ctx, tag+liftedSuffix, at.UnixMilli(), liftedKeep)
		return nil
	})
	return err
}

func validateScope(scope string) error {
	if scope != event.ScopeIP && scope != event.ScopeUser {
		return fmt.Errorf("scope %.16q is not one of ip, user", scope)
	}
	return nil
}
