package redisfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// staleAfter is the number of heartbeat intervals after which an instance
// that stopped beating is no longer counted as live.
const staleAfter = 3

// Heartbeats records in Redis that this limiter is alive and counts the
// limiters that are: every instance adds its id with the current time to one
// sorted set, <prefix>{instances}. One beat is also a health check, since it
// needs Redis to answer.
//
// Scores are the limiters' own clocks: a skew of a few seconds between
// instances only delays when a stopped one stops being counted.
//
// Each instance also reports the rule-set version it runs in the hash
// <prefix>{instances}:rules (field: instance id, value: RulesReport JSON),
// written when its rules change and again with every beat, so the report
// outlives a Redis restart.
type Heartbeats struct {
	client   redis.UniversalClient
	key      string
	rulesKey string
	instance string
	interval time.Duration
	rules    atomic.Pointer[string] // the last RulesReport, encoded
	lastKey  string
	keep     atomic.Int64 // the count to keep in lastKey with the next beat; 0: none
}

// keptFor is how long the fleet's last count of live instances stays in
// Redis after the last beat that wrote it.
const keptFor = 24 * time.Hour

// RulesReport is the rule set an instance runs.
type RulesReport struct {
	Version   string    `json:"version"`
	AppliedAt time.Time `json:"applied_at"`
}

// Instance is a live limiter and the rules it reported.
type Instance struct {
	ID       string
	LastSeen time.Time
	Rules    RulesReport // zero when it has not reported
}

// NewHeartbeats returns the heartbeats of instance, beating every interval.
func NewHeartbeats(client redis.UniversalClient, prefix, instance string, interval time.Duration) *Heartbeats {
	return &Heartbeats{client: client, key: prefix + "{instances}", rulesKey: prefix + "{instances}:rules",
		instance: instance, interval: interval, lastKey: prefix + "{instances}:last"}
}

// Beat records this instance as alive at now, drops the instances not seen
// for three intervals, and returns the number of live instances (at least
// 1: this one). ctx bounds the round trip.
func (h *Heartbeats) Beat(ctx context.Context, now time.Time) (int, error) {
	nowMs := now.UnixMilli()
	stale := strconv.FormatInt(nowMs-staleAfter*h.interval.Milliseconds(), 10)
	var count *redis.IntCmd
	_, err := h.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, h.key, redis.Z{Score: float64(nowMs), Member: h.instance})
		p.ZRemRangeByScore(ctx, h.key, "-inf", "("+stale)
		count = p.ZCount(ctx, h.key, stale, "+inf")
		// The set disappears when every limiter is gone.
		p.PExpire(ctx, h.key, 2*staleAfter*h.interval)
		if n := h.keep.Load(); n > 0 {
			p.Set(ctx, h.lastKey, n, keptFor)
		}
		if report := h.rules.Load(); report != nil {
			p.HSet(ctx, h.rulesKey, h.instance, *report)
			p.PExpire(ctx, h.rulesKey, 2*staleAfter*h.interval)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis heartbeat: %w", err)
	}
	return max(1, int(count.Val())), nil
}

// KeepCount makes every later beat keep n in Redis as the fleet's last
// count of live instances, which LastCount reads (<prefix>{instances}:last,
// kept for a day after the last beat).
func (h *Heartbeats) KeepCount(n int64) { h.keep.Store(n) }

// LastCount returns the fleet's last count of live instances kept in
// Redis, or 0 when there is none; a value that is not a count from 1 to
// 10 000 reads as none.
func (h *Heartbeats) LastCount(ctx context.Context) (int64, error) {
	raw, err := h.client.Get(ctx, h.lastKey).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redis last live count: %w", err)
	}
	n, perr := strconv.ParseInt(raw, 10, 64)
	if perr != nil || n < 1 || n > 10_000 {
		return 0, nil
	}
	return n, nil
}

// Leave removes this instance from the live set, so the others stop counting
// it at once rather than after three intervals.
func (h *Heartbeats) Leave(ctx context.Context) error {
	_, err := h.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, h.key, h.instance)
		p.HDel(ctx, h.rulesKey, h.instance)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis heartbeat leave: %w", err)
	}
	return nil
}

// ReportRules records the rule set this instance runs: at once (ctx bounds
// the round trip) and with every later beat, so a report that fails now is
// made at the next beat.
func (h *Heartbeats) ReportRules(ctx context.Context, r RulesReport) error {
	raw, _ := json.Marshal(r)
	report := string(raw)
	h.rules.Store(&report)
	_, err := h.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, h.rulesKey, h.instance, report)
		p.PExpire(ctx, h.rulesKey, 2*staleAfter*h.interval)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis report rules version: %w", err)
	}
	return nil
}

// Instances returns the live limiters (seen within three intervals of now)
// with the rules each reported, ordered by id. Reports of instances no
// longer live are removed on the way.
func (h *Heartbeats) Instances(ctx context.Context, now time.Time) ([]Instance, error) {
	stale := strconv.FormatInt(now.UnixMilli()-staleAfter*h.interval.Milliseconds(), 10)
	var (
		live    *redis.ZSliceCmd
		reports *redis.MapStringStringCmd
	)
	_, err := h.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		live = p.ZRangeByScoreWithScores(ctx, h.key, &redis.ZRangeBy{Min: stale, Max: "+inf"})
		reports = p.HGetAll(ctx, h.rulesKey)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis list instances: %w", err)
	}
	byID := reports.Val()
	out := make([]Instance, 0, len(live.Val()))
	for _, z := range live.Val() {
		id, _ := z.Member.(string)
		in := Instance{ID: id, LastSeen: time.UnixMilli(int64(z.Score)).UTC()}
		if raw, ok := byID[id]; ok {
			_ = json.Unmarshal([]byte(raw), &in.Rules) // an undecodable report shows as none
			delete(byID, id)
		}
		out = append(out, in)
	}
	if len(byID) > 0 {
		gone := make([]string, 0, len(byID))
		for id := range byID {
			gone = append(gone, id)
		}
		_ = h.client.HDel(ctx, h.rulesKey, gone...).Err() // best effort: they expire with the hash anyway
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
