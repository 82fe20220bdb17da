package decide

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkHoldsOfAFullKey: a take and a release on a key already holding
// n holds, in the memory model (what a limiter in local mode runs).
func BenchmarkHoldsOfAFullKey(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := NewMemory()
			c := Call{Algorithm: Concurrency, Keys: Keys{State: "k"}, Cost: 1, Limits: []Limit{{Requests: int64(n) + 1, Per: time.Hour}}}
			now := int64(1_000_000_000)
			for range n {
				c.HoldID = NewHoldID()
				m.Decide(c, now)
			}
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = NewHoldID()
			}
			b.ResetTimer()
			for i := range b.N {
				take := c
				take.HoldID = ids[i%len(ids)]
				m.Decide(take, now)
				take.Cost, take.Release = 0, true
				m.Decide(take, now)
			}
		})
	}
}
