package redisfleet

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscribeHealth is how long a subscription waits for a message before it
// pings the server to tell an idle connection from a dead one.
const subscribeHealth = 15 * time.Second

// subscribe calls onMessage with each message of channel until ctx ends,
// then returns nil, and calls onResync (when not nil) each time the
// subscription is established: at the start and after every reconnection,
// since pub/sub drops what is published while a subscriber is away. Both
// callbacks run on the caller's goroutine, one at a time.
func subscribe(ctx context.Context, client redis.UniversalClient, channel string, onMessage func(string), onResync func()) error {
	for {
		err := subscribeSession(ctx, client, channel, onMessage, onResync)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			continue
		}
		// A cluster client dials the subscription's node from its slot map,
		// refreshed on MOVED replies, on a timer and (Connect's hook) when a
		// command fails, none of which a subscription sees: without this, a
		// client that only subscribes would keep dialing a dead primary
		// until the timer, long after its replica took over.
		if cc, ok := client.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		select { // the server is down or unreachable: retry, not in a loop
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// subscribeSession subscribes on a PubSub of its own and delivers messages
// until ctx ends or the connection looks dead (no answer to a ping).
func subscribeSession(ctx context.Context, client redis.UniversalClient, channel string, onMessage func(string), onResync func()) error {
	ps := client.Subscribe(ctx, channel)
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks Receive
	defer stop()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, subscribeHealth)
		if err != nil {
			var nerr net.Error
			if ctx.Err() == nil && !pinged && errors.As(err, &nerr) && nerr.Timeout() {
				pinged = true
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && onResync != nil {
				onResync()
			}
		case *redis.Message:
			onMessage(m.Payload)
		}
	}
}
