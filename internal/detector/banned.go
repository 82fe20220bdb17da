package detector

import (
	"context"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// BlacklistMarker returns the ban check of OutcomePipeline that reads bl:
// it sets Banned on the outcomes whose client (its address, for IPv6 its
// prefix of ipv6Prefix bits) was banned at their time, and UserBanned on
// those whose user (its key, userKey) was, as a limiter's reports say
// them, in one round trip.
func BlacklistMarker(bl *redisfleet.Blacklist, ipv6Prefix int, userKey func(string) string) func(context.Context, []*event.Outcome) error {
	return func(ctx context.Context, outs []*event.Outcome) error {
		return markBanned(ctx, bl, ipv6Prefix, userKey, outs)
	}
}

func markBanned(ctx context.Context, bl *redisfleet.Blacklist, ipv6Prefix int, userKey func(string) string, outs []*event.Outcome) error {
	var sightings []redisfleet.Sighting
	var owner []int // the outcome of each sighting
	for i, o := range outs {
		sightings = append(sightings, redisfleet.Sighting{Scope: event.ScopeIP, Subject: rules.IPSubjectOf(o.IP, ipv6Prefix), At: o.TS})
		owner = append(owner, i)
		if o.UserID != "" {
			sightings = append(sightings, redisfleet.Sighting{Scope: event.ScopeUser, Subject: userKey(o.UserID), At: o.TS})
			owner = append(owner, i)
		}
	}
	banned, err := bl.BannedAt(ctx, sightings)
	if err != nil {
		return err
	}
	for j, b := range banned {
		switch o := outs[owner[j]]; {
		case !b:
		case sightings[j].Scope == event.ScopeIP:
			o.Banned = true
		default:
			o.UserBanned = true
		}
	}
	return nil
}
