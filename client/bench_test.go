package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

// BenchmarkCheckBreakerOpen is what a check costs while the limiter is
// known to be down: the breaker answers, the failure policy decides, no
// round trip.
func BenchmarkCheckBreakerOpen(b *testing.B) {
	c, err := New(Config{URL: "http://127.0.0.1:1", BreakerFailures: 1, BreakerOpen: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	req := &Request{IP: "203.0.113.7", Endpoint: "/api/books/{id}"}
	c.Check(ctx, req) // trips it: nothing listens on port 1
	if _, err := c.Check(ctx, req); !errors.Is(err, ErrBreakerOpen) {
		b.Fatalf("breaker not open: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, _ := c.Check(ctx, req); !d.Allowed || !d.Fallback {
			b.Fatal(d)
		}
	}
}

// BenchmarkCheck is a check against a limiter that answers at once
// (fastLimiter, in process): the client's own cost and one loopback round
// trip.
func BenchmarkCheck(b *testing.B) {
	c, err := New(Config{URL: fastLimiter(b, allowedAnswer)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	req := &Request{IP: "203.0.113.7", Endpoint: "/api/books/{id}"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, err := c.Check(ctx, req); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
