package redisstore

import (
	"context"
	"fmt"
	"strconv"
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
type Heartbeats struct {
	client   redis.UniversalClient
	key      string
	instance string
	interval time.Duration
}

// NewHeartbeats returns the heartbeats of instance, beating every interval.
func NewHeartbeats(client redis.UniversalClient, prefix, instance string, interval time.Duration) *Heartbeats {
	return &Heartbeats{client: client, key: prefix + "{instances}", instance: instance, interval: interval}
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
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis heartbeat: %w", err)
	}
	return max(1, int(count.Val())), nil
}

// Leave removes this instance from the live set, so the others stop counting
// it at once rather than after three intervals.
func (h *Heartbeats) Leave(ctx context.Context) error {
	if err := h.client.ZRem(ctx, h.key, h.instance).Err(); err != nil {
		return fmt.Errorf("redis heartbeat leave: %w", err)
	}
	return nil
}
