package redisfleet

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// RuleChanges is the pub/sub channel P{rules}:changes on which a limiter
// announces a new version of the dynamic rules. It only wakes the others
// early: the version is polled from the rule store as well, so a message
// lost (pub/sub is at most once) delays an update, never loses it.
type RuleChanges struct {
	client  redis.UniversalClient
	channel string
}

// NewRuleChanges returns the channel under the key prefix.
func NewRuleChanges(client redis.UniversalClient, prefix string) *RuleChanges {
	return &RuleChanges{client: client, channel: prefix + "{rules}:changes"}
}

// Publish announces version.
func (r *RuleChanges) Publish(ctx context.Context, version int64) error {
	if err := r.client.Publish(ctx, r.channel, strconv.FormatInt(version, 10)).Err(); err != nil {
		return fmt.Errorf("redis publish rule change: %w", err)
	}
	return nil
}

// Subscribe calls onVersion with every version announced until ctx ends,
// and onResync each time the subscription is (re)established, when
// announcements may have been missed. Undecodable messages are skipped.
func (r *RuleChanges) Subscribe(ctx context.Context, onVersion func(int64), onResync func()) error {
	return subscribe(ctx, r.client, r.channel, func(payload string) {
		if v, err := strconv.ParseInt(payload, 10, 64); err == nil {
			onVersion(v)
		}
	}, onResync)
}
