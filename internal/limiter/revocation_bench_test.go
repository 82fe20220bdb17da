//go:build bench

package limiter_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchLeaseRevocation (go test -tags bench -run TestBenchLeaseRevocation
// -v ./internal/limiter) measures how long after a debit passes a leased
// token budget the other of two limiters, checking the key back to back
// from its lease, answers OVER_LIMIT: with the notice, and without it
// (the bound of a lost notice: a second at most). BENCH_ROUNDS keys each.
func TestBenchLeaseRevocation(t *testing.T) {
	rounds := benchenv.Int(t, "BENCH_ROUNDS", 20)
	for _, notices := range []bool{true, false} {
		addr := redistest.StartServer(t)
		a, _ := tokenLimiter(t, addr, "a", notices)
		b, _ := tokenLimiter(t, addr, "b", notices)
		var took []time.Duration
		checks := 0
		for round := range rounds {
			key := "r" + strconv.Itoa(round)
			for range 200 { // both hold leases on the key
				tokenCheck(a, key, 0)
				tokenCheck(b, key, 0)
			}
			tokenCheck(a, key, 30_000)
			start := time.Now()
			for tokenCheck(b, key, 0) {
				checks++
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		fmt.Printf("notice %-5v: the other limiter answered OVER_LIMIT %v (min) %v (median) %v (max) after the debit, %d checks OK meanwhile over %d keys\n",
			notices, took[0], took[len(took)/2], took[len(took)-1], checks, rounds)
	}
}
