package redisabuse

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

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
// ban rather than issue another. An unban (redisfleet.Blacklist.Remove)
// deletes it so that the detector may ban the offender again; the
// escalation history stays. The layout of the detector's keys is known
// here alone, beside the scripts that write them: package redisfleet
// asks for this key rather than repeat the layout, so the dependency runs
// from the fleet's state to the detector's and never back (Ledger reaches
// the blacklist through an interface of its own).
func BanRecordKey(prefix, scope, subject string) string {
	return offenderTag(prefix, abuse.Offender{Scope: scope, Subject: subject}) + ":" + event.ActionBan
}

func validateScope(scope string) error {
	if scope != event.ScopeIP && scope != event.ScopeUser {
		return fmt.Errorf("scope %.16q is not one of ip, user", scope)
	}
	return nil
}
