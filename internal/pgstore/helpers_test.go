package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// newStore opens a migrated store on a database of the test's own.
func newStore(t *testing.T) *Store {
	t.Helper()
	return benchStore(t)
}

func benchStore(tb testing.TB) *Store {
	tb.Helper()
	s, err := OpenMigrated(context.Background(), pgtest.Database(tb), nil)
	if err != nil {
		tb.Fatalf("open migrated: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

func openStore(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// queryInt runs a query returning one integer.
func queryInt(t *testing.T, s *Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// violation returns a valid violation number i at time at.
func violation(i int, at time.Time) archiver.Violation {
	return archiver.Violation{
		EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), OccurredAt: at,
		UserID: fmt.Sprintf("u-%d", i%7), IP: fmt.Sprintf("203.0.113.%d", i%250),
		Endpoint: "/api/login", Method: "POST", Tier: "BASIC", RuleID: "login-per-ip",
		Algorithm: "sliding_window", Reason: event.ReasonRateLimited,
		Limit: 5, CurrentCount: 5, RetryAfterMs: 740, Instance: "limiter-1",
	}
}

func ban(id string, at time.Time) event.Ban {
	return event.Ban{
		BanID: id, TS: at, Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.7",
		Reason: "scan", Count: 57, Threshold: 50, WindowS: 10, DurationS: 3600, ExpiresAt: at.Add(time.Hour),
		Source: "detector", Evidence: event.Evidence{FirstTS: at.Add(-10 * time.Second), LastTS: at, SampleEndpoints: []string{"/a", "/b"}},
	}
}

// outcome returns a valid outcome number i at time at: a 401 on /api/login.
func outcome(i int, at time.Time) event.Outcome {
	return event.Outcome{
		EventID: fmt.Sprintf("00000000-0000-7000-8000-%012d", i), TS: at, Instance: "limiter-1",
		UserID: fmt.Sprintf("u-%d", i%7), IP: fmt.Sprintf("203.0.113.%d", i%250),
		Endpoint: "/api/login", Method: "POST", Tier: "BASIC", Status: 401, Cost: 1,
	}
}
