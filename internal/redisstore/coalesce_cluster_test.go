package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// subjectsOn returns one subject per primary of e, in e.Primaries order.
func subjectsOn(t *testing.T, e *redistest.SharedCluster, prefix string) []string {
	t.Helper()
	return e.Spread(t, len(e.Primaries), func(s string) string { return decidetest.Keys(prefix, s).State })
}

func fixedWindowCall(prefix, subject string, limit int64) decide.Call {
	return decide.Call{Keys: decidetest.Keys(prefix, subject), Algorithm: decide.FixedWindow,
		Limits: []decide.Limit{{Requests: limit, Per: time.Hour}}, Cost: 1}
}

// On a cluster every primary gets its own lane; a request whose calls live
// on three primaries is split and answered in order, and concurrent callers
// are admitted exactly up to the limit on every node.
func TestCoalescerLanePerPrimary(t *testing.T) {
	testkit.AvoidHourEnd(t) // the admitted are counted against the hour's limit
	e := redistest.StartSharedCluster(t, 0)
	c, client := e.Cluster, e.Client
	prefix := redistest.Prefix(t, client)
	subjects := subjectsOn(t, e, prefix)
	co := NewCoalescer(New(client), CoalesceConfig{})
	defer co.Close()

	const limit, callers = 50, 40
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for range 3 {
				// Each caller names the three subjects in its own order.
				calls := make([]decide.Call, 3)
				for j := range calls {
					s := subjects[(i+j)%3]
					calls[j] = fixedWindowCall(prefix, s, int64(limit+(i+j)%3))
				}
				r, err := co.Decide(context.Background(), calls)
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				for j := range calls {
					k := (i + j) % 3
					if r[j].Limit != int64(limit+k) {
						t.Errorf("caller %d, call %d: limit %d, want %d: results out of order", i, j, r[j].Limit, limit+k)
					}
					if r[j].Allowed {
						admitted[k].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != int64(limit+k) {
			t.Errorf("subject %s: %d admitted, want %d", subjects[k], got, limit+k)
		}
	}
	co.mu.RLock()
	lanes := len(co.lanes)
	for _, p := range c.Primaries() {
		if co.lanes[p.Addr] == nil {
			t.Errorf("no lane for primary %s", p.Addr)
		}
	}
	co.mu.RUnlock()
	if lanes != 3 {
		t.Errorf("%d lanes, want one per primary (3)", lanes)
	}
}

// A primary that hangs delays and fails only the calls it serves: the other
// primaries' callers are answered while it is stopped, its own callers get
// a partial *nodeError, first after the round-trip timeout, then, once a
// ping has found it dead rather than slow, at once while its breaker is
// open; once it answers again, a probe closes it.
func TestCoalescerIsolatesHungPrimary(t *testing.T) {
	e := redistest.StartSharedCluster(t, 0)
	c, client := e.Cluster, e.Client
	prefix := redistest.Prefix(t, client)
	subjects := subjectsOn(t, e, prefix)
	const timeout, retry = 300 * time.Millisecond, 500 * time.Millisecond
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: timeout, NodeFailures: 2, NodeRetry: retry, ProbeTimeout: timeout})
	defer co.Close()
	decideOne := func(subject string) (time.Duration, error) {
		start := time.Now()
		_, err := co.Decide(context.Background(), []decide.Call{fixedWindowCall(prefix, subject, 1000)})
		return time.Since(start), err
	}
	for _, s := range subjects { // every lane started and healthy
		if _, err := decideOne(s); err != nil {
			t.Fatal(err)
		}
	}

	hung := c.PrimaryOf(t, decidetest.Keys(prefix, subjects[0]).State)
	hung.Pause()
	defer hung.Resume()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 2 { // two failed round trips open the breaker (concurrent calls could share one)
			took, err := decideOne(subjects[0])
			var ne *nodeError
			if !errors.As(err, &ne) || ne.addr != hung.Addr || !ne.partial {
				t.Errorf("call on the hung primary: %v (took %v), want a partial nodeError of %s", err, took, hung.Addr)
			}
		}
	})
	for _, s := range subjects[1:] { // meanwhile the others answer
		if took, err := decideOne(s); err != nil || took >= timeout {
			t.Errorf("call on a healthy primary while another hangs: %v after %v", err, took)
		}
	}
	wg.Wait()
	testkit.WaitFor(t, 10*time.Second, "the ping to find the hung primary dead", func() bool {
		co.mu.RLock()
		defer co.mu.RUnlock()
		return co.lanes[hung.Addr].isOpen()
	})
	took, err := decideOne(subjects[0])
	if !errors.Is(err, errNodeDown) || took >= timeout/2 {
		t.Fatalf("breaker open: got %v after %v, want errNodeDown at once", err, took)
	}
	if ClassifyError(err) != "connection" {
		t.Errorf("ClassifyError(%v) = %q, want connection", err, ClassifyError(err))
	}
	for _, s := range subjects[1:] { // the breaker is the hung node's alone
		if _, err := decideOne(s); err != nil {
			t.Errorf("call on a healthy primary while another's breaker is open: %v", err)
		}
	}

	hung.Resume()
	time.Sleep(retry)
	if _, err := decideOne(subjects[0]); err != nil {
		t.Fatalf("probe after the node answers again: %v", err)
	}
}

// A killed primary's calls fail until its replica is promoted, then
// succeed again through the same client, which learns the new slot map
// without waiting for its periodic reload. It failed once when the
// failover crossed the hour, where the hour's window starts anew.
func TestCoalescerFollowsFailover(t *testing.T) {
	testkit.AvoidHourEnd(t) // the count read back is the hour's
	e := redistest.StartSharedCluster(t, 1)
	c := e.Cluster
	client, err := Connect(ClientConfig{ClusterAddrs: c.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := redistest.Prefix(t, c.Client(t))
	subjects := subjectsOn(t, e, prefix)
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: 300 * time.Millisecond, NodeRetry: 200 * time.Millisecond})
	defer co.Close()
	call := fixedWindowCall(prefix, subjects[0], 1000)
	if _, err := co.Decide(context.Background(), []decide.Call{call}); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, 10*time.Second)
	old := c.PrimaryOf(t, call.Keys.State)
	old.Kill()
	killed := time.Now()
	var failures int
	for {
		r, err := co.Decide(context.Background(), []decide.Call{call})
		if err == nil {
			// The promoted replica holds the count written before the kill.
			if r[0].Remaining != 998 {
				t.Errorf("after the failover: remaining %d, want 998 (the replicated count, then this call)", r[0].Remaining)
			}
			break
		}
		failures++
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("still failing 15s after the kill: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if failures == 0 {
		t.Fatal("no call failed: the killed primary's slot cannot have been served during the failover")
	}
	t.Logf("calls on the killed primary's slot failed for %v (%d attempts), then succeeded on %s",
		time.Since(killed).Round(time.Millisecond), failures, c.PrimaryOf(t, call.Keys.State).Addr)
}
