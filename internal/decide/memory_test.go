package decide_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

func TestMemoryScenarios(t *testing.T) {
	for _, s := range append(append(decidetest.Scenarios(), decidetest.HoldScenarios()...), decidetest.ReserveScenarios()...) {
		t.Run(s.Name, func(t *testing.T) {
			m := decide.NewMemory()
			keys := decidetest.Keys("test:", "subject")
			for i, step := range s.Steps {
				c := s.Call(keys, i)
				if err := c.Validate(); err != nil {
					t.Fatalf("step %d: invalid call: %v", i, err)
				}
				if got := m.Decide(c, 0); got != step.Want {
					t.Errorf("step %d (now %d, cost %d):\n got  %+v\n want %+v", i, step.NowMs, step.Cost, got, step.Want)
				}
			}
		})
	}
}

func TestMemoryNowArgument(t *testing.T) {
	m := decide.NewMemory()
	c := decide.Call{
		Keys:      decidetest.Keys("test:", "now"),
		Algorithm: decide.FixedWindow,
		Limits:    []decide.Limit{{Requests: 1, Per: time.Second}},
		Cost:      1,
	}
	if r := m.Decide(c, 5_000); !r.Allowed {
		t.Fatalf("first call denied: %+v", r)
	}
	if r := m.Decide(c, 5_500); r.Allowed || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("second call in the window: %+v", r)
	}
	c.NowMs = 6_000 // Call.NowMs replaces the clock argument
	if r := m.Decide(c, 5_500); !r.Allowed {
		t.Fatalf("call with NowMs in the next window denied: %+v", r)
	}
}

func TestMemorySweep(t *testing.T) {
	m := decide.NewMemory()
	limits := map[decide.Algorithm][]decide.Limit{
		decide.FixedWindow:          {{Requests: 1, Per: time.Second}},
		decide.SlidingWindow:        {{Requests: 1, Per: time.Second}},
		decide.SlidingWindowCounter: {{Requests: 1, Per: time.Second}},
		decide.TokenBucket:          {{Rate: 1, Per: time.Second, Burst: 1}},
	}
	for alg, l := range limits {
		for i := range 100 {
			c := decide.Call{
				Keys:        decidetest.Keys("test:", string(alg)+strconv.Itoa(i)),
				Algorithm:   alg,
				Limits:      l,
				Cost:        1,
				Penalty:     3 * time.Second,
				Escalations: []decide.Escalation{{Triggers: 2, Within: 4 * time.Second, Penalty: 5 * time.Second}},
			}
			m.Decide(c, 10_000)
			m.Decide(c, 10_000) // denied: hold and hits
		}
	}
	if n := m.Len(); n != 1200 {
		t.Fatalf("Len = %d, want 1200 (state, hold, hits of 400 subjects)", n)
	}
	m.Sweep(11_001) // state of the window log, fixed window and bucket has expired
	if n := m.Len(); n != 900 {
		t.Errorf("after state expiry Len = %d, want 900", n)
	}
	m.Sweep(12_000) // the window counter's count weighs until the next window ends
	if n := m.Len(); n != 800 {
		t.Errorf("after window counter expiry Len = %d, want 800", n)
	}
	m.Sweep(13_000) // holds expired
	if n := m.Len(); n != 400 {
		t.Errorf("after hold expiry Len = %d, want 400", n)
	}
	m.Sweep(14_001) // hits expired
	if n := m.Len(); n != 0 {
		t.Errorf("after hit expiry Len = %d, want 0", n)
	}
}

func TestMemoryConcurrent(t *testing.T) {
	for _, tc := range []struct {
		alg   decide.Algorithm
		limit decide.Limit
	}{
		{decide.FixedWindow, decide.Limit{Requests: 100, Per: time.Hour}},
		{decide.SlidingWindow, decide.Limit{Requests: 100, Per: time.Hour}},
		{decide.SlidingWindowCounter, decide.Limit{Requests: 100, Per: time.Hour}},
		{decide.TokenBucket, decide.Limit{Rate: 1, Per: time.Hour, Burst: 100}},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			m := decide.NewMemory()
			c := decide.Call{Keys: decidetest.Keys("test:", "hot"), Algorithm: tc.alg, Limits: []decide.Limit{tc.limit}, Cost: 1}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					for range 10 {
						if m.Decide(c, 3_600_000).Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 100 {
				t.Errorf("admitted %d, want 100", n)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := decide.Call{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{{Requests: 1, Per: time.Second}}, Cost: 1}
	tests := []struct {
		name   string
		change func(*decide.Call)
		ok     bool
	}{
		{"valid", func(*decide.Call) {}, true},
		{"no limits", func(c *decide.Call) { c.Limits = nil }, false},
		{"negative cost", func(c *decide.Call) { c.Cost = -1 }, false},
		{"sub-millisecond per", func(c *decide.Call) { c.Limits = []decide.Limit{{Requests: 1, Per: 1500 * time.Microsecond}} }, false},
		{"zero requests", func(c *decide.Call) { c.Limits = []decide.Limit{{Per: time.Second}} }, false},
		{"bucket without rate", func(c *decide.Call) {
			c.Algorithm = decide.TokenBucket
			c.Limits = []decide.Limit{{Burst: 1, Per: time.Second}}
		}, false},
		{"unknown algorithm", func(c *decide.Call) { c.Algorithm = "leaky" }, false},
		{"window counter", func(c *decide.Call) { c.Algorithm = decide.SlidingWindowCounter }, true},
		{"window counter without requests", func(c *decide.Call) {
			c.Algorithm = decide.SlidingWindowCounter
			c.Limits = []decide.Limit{{Rate: 1, Burst: 1, Per: time.Second}}
		}, false},
		{"escalation without triggers", func(c *decide.Call) {
			c.Escalations = []decide.Escalation{{Within: time.Second, Penalty: time.Second}}
		}, false},
		{"negative penalty", func(c *decide.Call) { c.Penalty = -time.Second }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.change(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func BenchmarkMemoryDecide(b *testing.B) {
	m := decide.NewMemory()
	for _, alg := range []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		b.Run(string(alg), func(b *testing.B) {
			limits := []decide.Limit{{Requests: 1000, Rate: 1000, Burst: 1000, Per: time.Second}}
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := n.Add(1)
				c := decide.Call{Keys: decidetest.Keys("bench:", strconv.FormatInt(i, 10)), Algorithm: alg, Limits: limits, Cost: 1}
				now := int64(1_000_000)
				for pb.Next() {
					now++
					m.Decide(c, now)
				}
			})
		})
	}
}

// TestBoundedMemory: a flood of distinct subjects stays within the bound,
// and what it evicts is state that expires sooner than an exhausted
// subject's: that subject stays denied throughout.
func TestBoundedMemory(t *testing.T) {
	const maxKeys, flood = 640, 20_000
	m := decide.NewBoundedMemory(maxKeys)
	bucket := func(subject string) decide.Call {
		return decide.Call{
			Keys: decidetest.Keys("test:", subject), Algorithm: decide.TokenBucket, Cost: 1,
			Limits: []decide.Limit{{Rate: 1, Per: time.Minute, Burst: 5}},
		}
	}
	const now = 1_000_000
	for i := range 5 {
		if r := m.Decide(bucket("heavy"), now); !r.Allowed {
			t.Fatalf("request %d of a burst of 5 denied", i+1)
		}
	}
	for i := range flood {
		m.Decide(bucket("fresh-"+strconv.Itoa(i)), now)
		if n := m.Len(); n > maxKeys {
			t.Fatalf("%d keys after %d subjects, bound %d", n, i+1, maxKeys)
		}
	}
	if r := m.Decide(bucket("heavy"), now); r.Allowed {
		t.Error("the exhausted subject was admitted again after the flood: its state was evicted")
	}
	if got, least := m.Evictions(), int64(flood+1-maxKeys); got < least {
		t.Errorf("%d evictions, want at least %d", got, least)
	}
}

// TestBoundedMemoryEvictsExpiredFirst: at the bound, expired keys go before
// live ones.
func TestBoundedMemoryEvictsExpiredFirst(t *testing.T) {
	m := decide.NewBoundedMemory(64 * 10) // 10 keys a shard
	window := func(subject string) decide.Call {
		return decide.Call{Keys: decidetest.Keys("test:", subject), Algorithm: decide.FixedWindow, Cost: 1,
			Limits: []decide.Limit{{Requests: 1, Per: time.Second}}}
	}
	for i := range 2_000 { // all expired by the next second
		m.Decide(window("old-"+strconv.Itoa(i)), 1_000)
	}
	for i := range 100 { // far fewer than the bound: nothing live is evicted
		m.Decide(window("new-"+strconv.Itoa(i)), 5_000)
	}
	for i := range 100 {
		if r := m.Decide(window("new-"+strconv.Itoa(i)), 5_000); r.Allowed {
			t.Fatalf("new-%d admitted twice in its window: its live state was evicted while expired keys were left", i)
		}
	}
}
