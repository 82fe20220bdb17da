// Package evict makes room in a bounded map in O(1), as Redis evicts keys:
// of a few entries sampled at random, the expired ones go, else the one
// that expires first.
package evict

// samples is how many entries one eviction looks at: Redis's default
// maxmemory-samples is 5; 8 picks the soonest of a sample more surely.
const samples = 8

// Sampled removes from m, of up to 8 entries in map order (which Go starts
// at a random place), every one whose expiry (by expiresAt) is at or
// before now, or, when none is, the one that expires first. It returns how
// many it removed: at least one unless m is empty.
func Sampled[K comparable, V any](m map[K]V, now int64, expiresAt func(V) int64) int {
	var victim K
	var soonest int64
	seen, freed := 0, 0
	for k, v := range m {
		if exp := expiresAt(v); exp <= now {
			delete(m, k)
			freed++
		} else if seen == freed || exp < soonest {
			victim, soonest = k, exp
		}
		if seen++; seen == samples {
			break
		}
	}
	if freed == 0 && seen > 0 {
		delete(m, victim)
		return 1
	}
	return freed
}
