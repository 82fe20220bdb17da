package redisfleet

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// LeaseNotices is the pub/sub channel P{leases}:past on which a limiter
// tells the others that it found a key of a leased rule past its limit (a
// debit of a rule that debits denied calls passed it): each message is the
// key's state key, and its receivers end their leases on it at once. It
// only hastens what the leases bound themselves: pub/sub is at most once,
// and a lease of such a rule answers only while Redis vouched for its key
// within a second (see package lease).
type LeaseNotices struct {
	client  redis.UniversalClient
	channel string
}

// NewLeaseNotices returns the channel under the key prefix.
func NewLeaseNotices(client redis.UniversalClient, prefix string) *LeaseNotices {
	return &LeaseNotices{client: client, channel: prefix + "{leases}:past"}
}

// Publish tells the others of keys, in one round trip.
func (n *LeaseNotices) Publish(ctx context.Context, keys []string) error {
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Publish(ctx, n.channel, k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis publish lease notices: %w", err)
	}
	return nil
}

// Subscribe calls onKey with every key told until ctx ends (this
// limiter's own included), then returns nil.
func (n *LeaseNotices) Subscribe(ctx context.Context, onKey func(key string)) error {
	return subscribe(ctx, n.client, n.channel, onKey, nil)
}
