package abusetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// warningOf names a warning record: an offender's warnings of one reason.
type warningOf struct {
	o      abuse.Offender
	reason string
}

// MemoryLedger is the in-memory Ledger: the reference the Redis
// implementation is tested against, and the ledger of replay tests. It
// works on event time only (Ban.TS), compared at millisecond precision, and
// keeps its whole history.
//
// A ban claim is a no-op while a recorded ban of the offender is active
// (ExpiresAt after the claim's TS): the latest recorded such ban is
// returned, with Publish set while it is unsettled. Otherwise the ban is
// recorded with DurationS and ExpiresAt escalated by the number of the
// offender's bans with TS in [TS-Period, TS) (see Escalation.DurationMs;
// DurationS is rounded up to whole seconds, ExpiresAt is TS plus the exact
// duration). A warning claim is a no-op in the same way while the latest
// warning of the offender for the same reason covers the claim (its TS + WarnFor after the
// claim's TS); a new warning has DurationS 0 and no ExpiresAt.
type MemoryLedger struct {
	mu       sync.Mutex
	bans     map[abuse.Offender][]*ledgerRecord
	warnings map[warningOf]*ledgerRecord
	byID     map[string]*ledgerRecord
	enforced []event.Ban
}

type ledgerRecord struct {
	ban      event.Ban
	tsMs     int64
	untilMs  int64 // ExpiresAt for a ban, TS+WarnFor for a warning
	settled  bool
	enforced bool
}

// NewMemoryLedger returns an empty ledger.
func NewMemoryLedger() *MemoryLedger {
	return &MemoryLedger{
		bans:     make(map[abuse.Offender][]*ledgerRecord),
		warnings: make(map[warningOf]*ledgerRecord),
		byID:     make(map[string]*ledgerRecord),
	}
}

// Claim records c.Ban unless an active ban or warning of the offender
// covers it.
func (l *MemoryLedger) Claim(ctx context.Context, c abuse.Claim) (abuse.Claimed, error) {
	if err := ctx.Err(); err != nil {
		return abuse.Claimed{}, err
	}
	b := c.Ban
	o := abuse.Offender{Scope: b.Scope, Subject: b.Subject}
	ts := b.TS.UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch b.Action {
	case event.ActionBan:
		history := l.bans[o]
		n := int64(0)
		for i := len(history) - 1; i >= 0; i-- {
			if r := history[i]; r.untilMs > ts {
				return abuse.Claimed{Ban: r.ban, Publish: !r.settled}, nil
			}
		}
		from := ts - c.Escalation.Period.Milliseconds()
		for _, r := range history {
			if r.tsMs >= from && r.tsMs < ts {
				n++
			}
		}
		d := c.Escalation.DurationMs(b.DurationS*1000, n)
		dd := time.Duration(min(d, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
		b.DurationS = (dd.Milliseconds() + 999) / 1000 // whole seconds, rounded up
		b.ExpiresAt = b.TS.Add(dd)
		r := &ledgerRecord{ban: b, tsMs: ts, untilMs: satAdd(ts, d)}
		l.bans[o] = append(history, r)
		l.byID[b.BanID] = r
		return abuse.Claimed{Ban: b, Publish: true}, nil
	case event.ActionWarn:
		w := warningOf{o, b.Reason}
		if r := l.warnings[w]; r != nil && r.untilMs > ts {
			return abuse.Claimed{Ban: r.ban, Publish: !r.settled}, nil
		}
		b.DurationS, b.ExpiresAt = 0, time.Time{}
		r := &ledgerRecord{ban: b, tsMs: ts, untilMs: satAdd(ts, c.WarnFor.Milliseconds())}
		l.warnings[w] = r
		l.byID[b.BanID] = r
		return abuse.Claimed{Ban: b, Publish: true}, nil
	}
	return abuse.Claimed{}, fmt.Errorf("claim %s: action %q is not ban or warn", b.BanID, b.Action)
}

// Settle marks the record of ban published; with enforce, a ban becomes
// enforced (see Enforced). Settling twice changes nothing.
func (l *MemoryLedger) Settle(ctx context.Context, ban event.Ban, enforce bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.byID[ban.BanID]
	if r == nil {
		return fmt.Errorf("settle %s: no such claim", ban.BanID)
	}
	r.settled = true
	if enforce && r.ban.Action == event.ActionBan && !r.enforced {
		r.enforced = true
		l.enforced = append(l.enforced, r.ban)
	}
	return nil
}

// Enforced returns the bans settled with enforce, in settlement order: what
// the blacklist would hold (expiry aside).
func (l *MemoryLedger) Enforced() []event.Ban {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event.Ban(nil), l.enforced...)
}

// satAdd is a+b, saturating at the int64 bounds.
func satAdd(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return 1<<63 - 1
		}
		return -1 << 63
	}
	return s
}
