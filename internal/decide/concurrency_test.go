package decide_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

func TestHoldID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := decide.NewHoldID()
		if len(id) != decide.HoldIDLen || !decide.ValidHoldID(id) {
			t.Fatalf("NewHoldID() = %q: not a valid id", id)
		}
		if seen[id] {
			t.Fatalf("NewHoldID() gave %q twice", id)
		}
		seen[id] = true
	}
	valid := decidetest.HoldID('a')
	for _, id := range []string{
		"", valid[:21], valid + "A", // lengths
		strings.Repeat("a", 21) + "B",                                                                 // the last character carries bits past the 16 bytes
		strings.Repeat("a", 21) + "=", strings.Repeat("a", 20) + "+A", strings.Repeat("a", 20) + "/A", // not base64url
		strings.Repeat("a", 20) + "éA"[:1] + "A",
	} {
		if decide.ValidHoldID(id) {
			t.Errorf("ValidHoldID(%q) = true", id)
		}
	}
	if !decide.ValidHoldID(valid) || !decide.ValidHoldID(strings.Repeat("-", 21)+"w") {
		t.Error("a well-formed id refused")
	}
}

func TestValidateConcurrency(t *testing.T) {
	valid := decide.Call{Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}, Cost: 1, HoldID: decide.NewHoldID()}
	tests := []struct {
		name   string
		change func(*decide.Call)
		ok     bool
	}{
		{"take", func(*decide.Call) {}, true},
		{"release", func(c *decide.Call) { c.Release = true }, true},
		{"release of cost 0", func(c *decide.Call) { c.Release, c.Cost = true, 0 }, true},
		{"would one fit", func(c *decide.Call) { c.Cost, c.HoldID = 0, "" }, true},
		{"take without id", func(c *decide.Call) { c.HoldID = "" }, false},
		{"release without id (the oldest)", func(c *decide.Call) { c.HoldID, c.Release, c.Cost = "", true, 0 }, true},
		{"malformed id", func(c *decide.Call) { c.HoldID = "not-an-id" }, false},
		{"malformed id at cost 0", func(c *decide.Call) { c.HoldID, c.Cost = "x", 0 }, false},
		{"cost 2", func(c *decide.Call) { c.Cost = 2 }, false},
		{"two limits", func(c *decide.Call) { c.Limits = append(c.Limits, c.Limits[0]) }, false},
		{"no requests", func(c *decide.Call) { c.Limits = []decide.Limit{{Per: time.Minute}} }, false},
		{"a burst", func(c *decide.Call) { c.Limits = []decide.Limit{{Requests: 1, Burst: 1, Per: time.Minute}} }, false},
		{"sub-millisecond lifetime", func(c *decide.Call) { c.Limits = []decide.Limit{{Requests: 1, Per: time.Microsecond}} }, false},
		{"penalty", func(c *decide.Call) { c.Penalty = time.Second }, false},
		{"escalations", func(c *decide.Call) {
			c.Escalations = []decide.Escalation{{Triggers: 1, Within: time.Second, Penalty: time.Second}}
		}, false},
		{"debit denied", func(c *decide.Call) { c.DebitDenied = true }, false},
		{"probe", func(c *decide.Call) { c.Probe = true }, false},
		{"leased", func(c *decide.Call) { c.Leased = true }, false},
		{"a hold on another algorithm", func(c *decide.Call) { c.Algorithm = decide.FixedWindow }, false},
		{"a release on another algorithm", func(c *decide.Call) { c.Algorithm, c.HoldID, c.Release = decide.FixedWindow, "", true }, false},
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

// TestHoldsForeignRelease: a hold is released only through its own key;
// the same id on another key is unknown there.
func TestHoldsForeignRelease(t *testing.T) {
	m := decide.NewMemory()
	rule := decide.Call{Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: 1, Per: time.Minute}}}
	take, foreign := rule, rule
	take.Keys, take.Cost, take.HoldID = decidetest.Keys("t:", "mine"), 1, decide.NewHoldID()
	foreign.Keys, foreign.HoldID, foreign.Release = decidetest.Keys("t:", "other"), take.HoldID, true
	if r := m.Decide(take, 1_000); !r.Allowed {
		t.Fatalf("take: %+v", r)
	}
	if r := m.Decide(foreign, 1_001); r.Released {
		t.Fatalf("released through another key: %+v", r)
	}
	again := take
	again.HoldID = decide.NewHoldID()
	if r := m.Decide(again, 1_002); r.Allowed {
		t.Fatalf("a second hold admitted after a foreign release: %+v", r)
	}
}

// TestHoldGiveBack: the give-back of a take answered late releases its
// hold, and applied twice changes nothing more; a lapsed hold is left for
// the next call to count.
func TestHoldGiveBack(t *testing.T) {
	m := decide.NewMemory()
	c := decide.Call{Keys: decidetest.Keys("t:", "gb"), Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: 2, Per: time.Second}}, Cost: 1}
	a, b := c, c
	a.HoldID, b.HoldID = decide.NewHoldID(), decide.NewHoldID()
	ra, rb := m.Decide(a, 10_000), m.Decide(b, 10_000)
	g, ok := decide.GiveBackOf(a, ra)
	if !ok || g.Units() != 1 {
		t.Fatalf("GiveBackOf(take) = %+v, %v", g, ok)
	}
	if n := m.GiveBack(g, 10_100); n != 1 {
		t.Fatalf("give-back released %d", n)
	}
	if n := m.GiveBack(g, 10_100); n != 0 {
		t.Fatalf("the give-back applied again released %d", n)
	}
	probe := c
	probe.Cost = 0
	if r := m.Decide(probe, 10_200); r.Remaining != 1 {
		t.Fatalf("after give-backs %d remain, want 1 (b holds one)", r.Remaining)
	}
	gb, _ := decide.GiveBackOf(b, rb)
	if n := m.GiveBack(gb, 11_000); n != 0 {
		t.Fatalf("give-back of a lapsed hold released %d", n)
	}
	if r := m.Decide(probe, 11_000); r.Lapsed != 1 || r.Remaining != 2 {
		t.Fatalf("the lapsed hold was not counted by the next call: %+v", r)
	}
	rel := a
	rel.Release = true
	if _, ok := decide.GiveBackOf(rel, decide.Result{Allowed: true, Released: true}); ok {
		t.Error("a release has a give-back")
	}
	denied := a
	if _, ok := decide.GiveBackOf(denied, decide.Result{}); ok {
		t.Error("a denied take has a give-back")
	}
}

// TestHoldsExact: goroutines take holds of one key at once: exactly the
// limit is admitted; once those are released, exactly the limit again;
// and while goroutines take and release at random, the holds in flight
// never pass it.
func TestHoldsExact(t *testing.T) {
	const limit, takers = 5, 50
	m := decide.NewMemory()
	rule := decide.Call{Keys: decidetest.Keys("t:", "exact"), Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: limit, Per: time.Hour}}, Cost: 1}
	round := func() []decide.Call {
		var mu sync.Mutex
		var admitted []decide.Call
		var wg sync.WaitGroup
		for range takers {
			wg.Go(func() {
				c := rule
				c.HoldID = decide.NewHoldID()
				if m.Decide(c, 1_000).Allowed {
					mu.Lock()
					admitted = append(admitted, c)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return admitted
	}
	for r := range 2 {
		held := round()
		if len(held) != limit {
			t.Fatalf("round %d: %d of %d takes admitted, limit %d", r, len(held), takers, limit)
		}
		for _, c := range held {
			c.Release = true
			if res := m.Decide(c, 1_000); !res.Released {
				t.Fatalf("release of a hold taken: %+v", res)
			}
		}
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	var wg sync.WaitGroup
	for range takers {
		wg.Go(func() {
			for range 40 {
				c := rule
				c.HoldID = decide.NewHoldID()
				if !m.Decide(c, 1_000).Allowed {
					continue
				}
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inFlight-- // before the release: a hold counted here is still held in the model
				mu.Unlock()
				c.Release = true
				m.Decide(c, 1_000)
			}
		})
	}
	wg.Wait()
	if most > limit {
		t.Errorf("%d in flight, limit %d", most, limit)
	}
	if m.Len() != 0 {
		t.Errorf("%d keys left after every hold was released", m.Len())
	}
}

// TestHoldsSweep: a key of holds nobody releases is swept one lifetime
// after its latest hold lapses; a call before that counts the lapsed.
func TestHoldsSweep(t *testing.T) {
	m := decide.NewMemory()
	c := decide.Call{Keys: decidetest.Keys("t:", "sweep"), Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: 3, Per: time.Second}}, Cost: 1}
	for _, now := range []int64{1_000, 1_500} {
		c.HoldID = decide.NewHoldID()
		m.Decide(c, now)
	}
	m.Sweep(3_499)
	if m.Len() != 1 {
		t.Fatalf("swept before a lifetime past the latest hold's lapse")
	}
	probe := c
	probe.Cost, probe.HoldID = 0, ""
	if r := m.Decide(probe, 3_499); r.Lapsed != 2 {
		t.Fatalf("a call after both lapsed counted %d lapsed, want 2", r.Lapsed)
	}
	for _, now := range []int64{1_000, 1_500} {
		c.HoldID = decide.NewHoldID()
		m.Decide(c, now)
	}
	m.Sweep(3_500)
	if m.Len() != 0 {
		t.Fatalf("not swept a lifetime after the latest hold lapsed")
	}
}
