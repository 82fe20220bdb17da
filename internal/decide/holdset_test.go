package decide

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestHoldSetRandom runs random adds, removes, drops and oldest-hold lookups on a holdSet and
// on a plain map scanned in full, the obvious reference, and compares
// every answer; the heaps never hold more than a constant times the holds.
func TestHoldSetRandom(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		s, ref := newHoldSet(), map[string]int64{}
		now := int64(1000)
		for step := range 5000 {
			id := fmt.Sprint("h", rng.IntN(300))
			switch r := rng.IntN(10); {
			case r < 4:
				if _, ok := ref[id]; !ok {
					lapse := now + int64(rng.IntN(200)) // lapses out of order, ties
					s.add(id, lapse)
					ref[id] = lapse
				}
			case r < 7:
				_, want := ref[id]
				delete(ref, id)
				if got := s.remove(id); got != want {
					t.Fatalf("seed %d step %d: remove %s = %v, want %v", seed, step, id, got, want)
				}
			default:
				now += int64(rng.IntN(30))
				var want int64
				for id, lapse := range ref {
					if lapse <= now {
						delete(ref, id)
						want++
					}
				}
				if got := s.dropLapsed(now); got != want {
					t.Fatalf("seed %d step %d: dropped %d, want %d", seed, step, got, want)
				}
			}
			if s.len() != len(ref) {
				t.Fatalf("seed %d step %d: %d holds, want %d", seed, step, s.len(), len(ref))
			}
			if len(ref) > 0 {
				first, last, oldest := int64(-1), int64(-1), ""
				for id, lapse := range ref {
					if first < 0 || lapse < first || (lapse == first && id < oldest) {
						first, oldest = lapse, id
					}
					last = max(last, lapse)
				}
				if s.first() != first || s.last() != last || s.oldest() != oldest {
					t.Fatalf("seed %d step %d: first %d last %d oldest %s, want %d, %d and %s",
						seed, step, s.first(), s.last(), s.oldest(), first, last, oldest)
				}
			}
			if n := max(len(s.early.items), len(s.late.items)); n > 2*s.len()+64+1 {
				t.Fatalf("seed %d step %d: %d heap entries for %d holds", seed, step, n, s.len())
			}
		}
	}
}
