package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestHeartbeatsCountLiveInstances(t *testing.T) {
	client := newClient(t, redisAddr())
	prefix := testPrefix(t, client)
	ctx := context.Background()
	const interval = time.Second
	t0 := time.Now()
	a := NewHeartbeats(client, prefix, "a", interval)
	b := NewHeartbeats(client, prefix, "b", interval)

	steps := []struct {
		name string
		beat *Heartbeats
		at   time.Duration
		want int
	}{
		{"first instance alone", a, 0, 1},
		{"second instance joins", b, 100 * time.Millisecond, 2},
		{"a beats again: still two", a, time.Second, 2},
		{"b is stale after three intervals", a, 3*time.Second + 200*time.Millisecond, 1},
		{"b comes back", b, 3*time.Second + 300*time.Millisecond, 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.beat.Beat(ctx, t0.Add(st.at))
			if err != nil {
				t.Fatal(err)
			}
			if got != st.want {
				t.Fatalf("live = %d, want %d", got, st.want)
			}
		})
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Beat(ctx, t0.Add(3*time.Second+400*time.Millisecond)); err != nil || got != 1 {
		t.Fatalf("after leave: live = %d, %v; want 1", got, err)
	}
	if ttl := client.PTTL(ctx, prefix+"{instances}").Val(); ttl <= 0 {
		t.Fatalf("heartbeat set has no expiry: %v", ttl)
	}
}

func TestHeartbeatFailsFastOnDeadRedis(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	h := NewHeartbeats(dead, "rwtest:", "a", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := h.Beat(ctx, time.Now()); err == nil {
		t.Fatal("beat on a dead redis succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("beat took %v", took)
	}
}
