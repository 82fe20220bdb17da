package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// connect is a client of addr as the limiter makes it (Connect), with the
// round-trip timeout of the tests below.
func connect(t *testing.T, addr string) redis.UniversalClient {
	t.Helper()
	c, err := Connect(ClientConfig{URL: "redis://" + addr + "/0", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A slow node is not a dead one: round trips that time out fail with an
// outcome the limiter cannot know (not Unreached), and after NodeFailures
// of them a ping, which the node answers, keeps its breaker closed, so its
// calls keep going to it rather than being decided locally. A node that
// does not answer the ping is down: its calls then fail at once, Unreached.
func TestCoalescerSlowNodeIsNotDown(t *testing.T) {
	proxy := redistest.StartSlowProxy(t, redisAddr())
	client := connect(t, proxy.Addr())
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	reg := prometheus.NewRegistry()
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: 50 * time.Millisecond, NodeFailures: 2,
		NodeRetry: time.Minute, ProbeTimeout: time.Second, Registerer: reg})
	defer co.Close()
	call := []decide.Call{{Keys: decidetest.Keys(prefix, "slow"), Algorithm: decide.FixedWindow,
		Limits: []decide.Limit{{Requests: 100, Per: time.Hour}}, Cost: 1}}
	if _, err := co.Decide(context.Background(), call); err != nil {
		t.Fatal(err)
	}

	proxy.SetDelay(1, 150*time.Millisecond) // every reply, three times the timeout
	for i := range 4 {
		_, err := co.Decide(context.Background(), call)
		if err == nil || Unreached(err) || ClassifyError(err) != classTimeout {
			t.Fatalf("round trip %d to a slow node: %v (unreached %v), want a timeout of unknown outcome", i, err, Unreached(err))
		}
	}
	probes := co.probes.WithLabelValues(probeSlow)
	testkit.WaitFor(t, 10*time.Second, "a ping to find the node slow", func() bool { return testutil.ToFloat64(probes) >= 1 })
	if co.single.isOpen() {
		t.Fatal("the breaker of a node that answers pings opened")
	}
	proxy.SetDelay(0, 0)
	if _, err := co.Decide(context.Background(), call); err != nil {
		t.Fatalf("the node answering in time again: %v", err)
	}

	// A node refusing connections: its round trips fail (go-redis reports
	// the dials it retried within the timeout as a timeout), the ping
	// fails at once, and from then on its calls fail at once, Unreached.
	refused := NewCoalescer(New(connect(t, "127.0.0.1:1")),
		CoalesceConfig{Timeout: 50 * time.Millisecond, NodeFailures: 2, NodeRetry: time.Minute})
	defer refused.Close()
	for range 2 {
		if _, err := refused.Decide(context.Background(), call); err == nil {
			t.Fatal("a call to a node refusing connections succeeded")
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the breaker of a node refusing connections to open", refused.single.isOpen)
	if _, err := refused.Decide(context.Background(), call); !errors.Is(err, errNodeDown) || !Unreached(err) {
		t.Fatalf("a call once the breaker is open: %v, want errNodeDown, Unreached", err)
	}
}
