package redisfleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
)

// Blacklist is the set of active bans the limiters enforce, written by the
// detector and the admin API. Under the prefix P (one Redis Cluster slot):
// P{bans} sorted set (member "<scope>|<subject>", score expiry ms),
// P{bans}:details hash (same member, the ban's JSON) and the pub/sub channel
// P{bans}:changes ("ban|<scope>|<expires_ms>|<subject>" or
// "unban|<scope>|0|<subject>"). It is safe for concurrent use.
type Blacklist struct {
	client redis.UniversalClient
	prefix string
	now    func() time.Time
}

// addRetries bounds the optimistic transactions of Add under contention.
const addRetries = 16

// keep is how long (wall clock) the blacklist's keys outlive its longest
// ban.
const keep = time.Minute

// NewBlacklist returns the blacklist under the key prefix (which must not
// contain '{' or '}').
func NewBlacklist(client redis.UniversalClient, prefix string) *Blacklist {
	return &Blacklist{client: client, prefix: prefix, now: time.Now}
}

func (b *Blacklist) setKey() string     { return b.prefix + "{bans}" }
func (b *Blacklist) detailsKey() string { return b.prefix + "{bans}:details" }

// channel is the pub/sub channel of the changes.
func (b *Blacklist) channel() string { return b.prefix + "{bans}:changes" }

func member(scope, subject string) string { return scope + "|" + subject }

// Add bans ban.Scope and ban.Subject until ban.ExpiresAt, drops expired
// entries, then announces the change. A ban never shortens one in force:
// when the subject is banned until ban.ExpiresAt or later (a detector ban
// outlasting a manual one, or the reverse), nothing is written and Add
// reports false. A ban that has already expired writes nothing either.
// Only an unban (Remove) ends a ban early.
func (b *Blacklist) Add(ctx context.Context, ban event.Ban) (bool, error) {
	if ban.Action != event.ActionBan || ban.ExpiresAt.IsZero() {
		return false, fmt.Errorf("redis blacklist add: not a ban with an expiry")
	}
	data, err := event.EncodeBan(ban)
	if err != nil {
		return false, fmt.Errorf("redis blacklist add: %w", err)
	}
	now, expires := b.now().UnixMilli(), ban.ExpiresAt.UnixMilli()
	if expires <= now {
		return false, nil
	}
	m := member(ban.Scope, ban.Subject)
	var longer bool
	write := func(tx *redis.Tx) error {
		cur, err := tx.ZScore(ctx, b.setKey(), m).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if longer = err == nil && int64(cur) >= expires; longer {
			return nil
		}
		// Expired members are read under WATCH so that one re-added
		// meanwhile is not deleted with its old details.
		expired, err := tx.ZRangeArgs(ctx, redis.ZRangeArgs{Key: b.setKey(), ByScore: true,
			Start: "-inf", Stop: strconv.FormatInt(now, 10), Count: 1000}).Result()
		if err != nil {
			return err
		}
		last, err := tx.ZRangeWithScores(ctx, b.setKey(), -1, -1).Result()
		if err != nil {
			return err
		}
		until := expires
		if len(last) == 1 {
			until = max(until, int64(last[0].Score))
		}
		// A TTL, not PEXPIREAT: every instant here is on this process's
		// clock, and Redis's own clock may differ from it.
		ttl := time.Duration(until-now)*time.Millisecond + keep
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, b.setKey(), redis.Z{Score: float64(expires), Member: m})
			p.HSet(ctx, b.detailsKey(), m, data)
			if stale := without(expired, m); len(stale) > 0 {
				p.ZRem(ctx, b.setKey(), toAny(stale)...)
				p.HDel(ctx, b.detailsKey(), stale...)
			}
			p.PExpire(ctx, b.setKey(), ttl)
			p.PExpire(ctx, b.detailsKey(), ttl)
			return nil
		})
		return err
	}
	for range addRetries {
		if err = b.client.Watch(ctx, write, b.setKey()); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("redis blacklist add: %w", err)
	}
	if longer {
		return false, nil
	}
	msg := "ban|" + ban.Scope + "|" + strconv.FormatInt(expires, 10) + "|" + ban.Subject
	if err := b.client.Publish(ctx, b.channel(), msg).Err(); err != nil {
		return true, fmt.Errorf("redis blacklist add: publish: %w", err)
	}
	return true, nil
}

// Lookup returns the ban of scope and subject in force at now, if any,
// with its details as Active returns them.
func (b *Blacklist) Lookup(ctx context.Context, scope, subject string, now time.Time) (event.Ban, bool, error) {
	m := member(scope, subject)
	var score *redis.FloatCmd
	var details *redis.StringCmd
	if _, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		score = p.ZScore(ctx, b.setKey(), m)
		details = p.HGet(ctx, b.detailsKey(), m)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return event.Ban{}, false, fmt.Errorf("redis blacklist lookup: %w", err)
	}
	ms, err := score.Result()
	if errors.Is(err, redis.Nil) || (err == nil && int64(ms) <= now.UnixMilli()) {
		return event.Ban{}, false, nil
	}
	if err != nil {
		return event.Ban{}, false, fmt.Errorf("redis blacklist lookup: %w", err)
	}
	return banOf(scope, subject, details.Val(), ms), true, nil
}

// banOf is the ban of a blacklist entry: its details (the ban's JSON) with
// the entry's expiry, or, when they are missing or unreadable, a ban of
// scope and subject with that expiry only (it is enforced all the same).
func banOf(scope, subject, details string, expiresMs float64) event.Ban {
	ban, err := event.DecodeBan([]byte(details))
	if err != nil || ban.Scope != scope || ban.Subject != subject {
		ban = event.Ban{Action: event.ActionBan, Scope: scope, Subject: subject}
	}
	ban.ExpiresAt = time.UnixMilli(int64(expiresMs)).UTC()
	return ban
}

// Remove lifts the ban of scope and subject and reports whether there was
// one; when there was none it changes nothing. It also tells the detector's state of the lift (redisabuse.Lift),
// so the detector may ban the offender again, but only for what it does
// after the lift; its escalation history stays. That state is the
// detector's, which names its keys: this package depends on redisabuse for that one function, and
// redisabuse reaches the blacklist only through an interface of its own,
// so there is no cycle and the layout of the detector's keys is known in
// one place.
func (b *Blacklist) Remove(ctx context.Context, scope, subject string) (bool, error) {
	if err := validateScope(scope); err != nil {
		return false, fmt.Errorf("redis blacklist remove: %w", err)
	}
	m := member(scope, subject)
	var zrem *redis.IntCmd
	if _, err := b.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		zrem = p.ZRem(ctx, b.setKey(), m)
		p.HDel(ctx, b.detailsKey(), m)
		return nil
	}); err != nil {
		return false, fmt.Errorf("redis blacklist remove: %w", err)
	}
	removed := zrem.Val() > 0
	if !removed {
		// No ban to lift: the detector's count of the subject stays. A lift
		// mark would wipe an offender's evidence at a call that did nothing.
		return false, nil
	}
	if err := redisabuse.Lift(ctx, b.client, b.prefix, scope, subject, b.now()); err != nil {
		return false, fmt.Errorf("redis blacklist remove: detector's record: %w", err)
	}
	if err := b.client.Publish(ctx, b.channel(), "unban|"+scope+"|0|"+subject).Err(); err != nil {
		return true, fmt.Errorf("redis blacklist remove: publish: %w", err)
	}
	return true, nil
}

// Active returns every ban that expires after now, with its details. An
// entry whose details are missing or unreadable is returned with its
// scope, subject and expiry only (it is still enforced).
func (b *Blacklist) Active(ctx context.Context, now time.Time) ([]event.Ban, error) {
	entries, err := b.client.ZRangeByScoreWithScores(ctx, b.setKey(), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis blacklist active: %w", err)
	}
	const chunk = 1000
	bans := make([]event.Ban, 0, len(entries))
	for start := 0; start < len(entries); start += chunk {
		part := entries[start:min(start+chunk, len(entries))]
		fields := make([]string, len(part))
		for i, z := range part {
			fields[i], _ = z.Member.(string)
		}
		details, err := b.client.HMGet(ctx, b.detailsKey(), fields...).Result()
		if err != nil {
			return nil, fmt.Errorf("redis blacklist active: %w", err)
		}
		for i, z := range part {
			scope, subject, ok := strings.Cut(fields[i], "|")
			if !ok {
				continue
			}
			data, _ := details[i].(string)
			bans = append(bans, banOf(scope, subject, data, z.Score))
		}
	}
	return bans, nil
}

// SubscribeResync calls onChange for each change of the blacklist until ctx
// ends, then returns nil, and calls onResync (when not nil) each time the
// subscription is established: at the start and after every
// reconnection, since changes published while disconnected are lost. A
// caller keeping a copy of the blacklist reloads Active there (and, as
// pub/sub is at most once, periodically as well). Undecodable messages are
// skipped. Both callbacks run on the caller's goroutine, one at a time.
func (b *Blacklist) SubscribeResync(ctx context.Context, onChange func(event.BanChange), onResync func()) error {
	return subscribe(ctx, b.client, b.channel(), func(payload string) {
		if c, ok := parseChange(payload); ok {
			onChange(c)
		}
	}, onResync)
}

// parseChange decodes "<action>|<scope>|<expires_ms>|<subject>".
func parseChange(msg string) (event.BanChange, bool) {
	parts := strings.SplitN(msg, "|", 4)
	if len(parts) != 4 || parts[3] == "" || validateScope(parts[1]) != nil {
		return event.BanChange{}, false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return event.BanChange{}, false
	}
	c := event.BanChange{Action: parts[0], Scope: parts[1], Subject: parts[3]}
	switch {
	case c.Action == event.ActionBan && ms > 0:
		c.ExpiresAt = time.UnixMilli(ms).UTC()
	case c.Action == event.ActionUnban && ms == 0:
	default:
		return event.BanChange{}, false
	}
	return c, true
}

func validateScope(scope string) error {
	if scope != event.ScopeIP && scope != event.ScopeUser {
		return fmt.Errorf("scope %.16q is not one of ip, user", scope)
	}
	return nil
}

func without(list []string, s string) []string {
	out := list[:0:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func toAny(list []string) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	return out
}

// Sighting is a subject seen at a time, for BannedAt.
type Sighting struct {
	Scope, Subject string
	At             time.Time
}

// BannedAt reports, for each sighting, whether the blacklist holds a ban of
// its subject that lasts past its time, in one round trip. A ban is known
// by its expiry only: one that was lifted or replaced since is not seen,
// and one issued after the sighting but still in force is (the sighting is
// then taken as the ban's own refusal, which errs toward not counting it).
func (b *Blacklist) BannedAt(ctx context.Context, sightings []Sighting) ([]bool, error) {
	cmds := make([]*redis.FloatCmd, len(sightings))
	if _, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sightings {
			cmds[i] = p.ZScore(ctx, b.setKey(), member(s.Scope, s.Subject))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis blacklist banned at: %w", err)
	}
	out := make([]bool, len(sightings))
	for i, cmd := range cmds {
		ms, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("redis blacklist banned at: %w", err)
		default:
			out[i] = int64(ms) > sightings[i].At.UnixMilli()
		}
	}
	return out, nil
}
