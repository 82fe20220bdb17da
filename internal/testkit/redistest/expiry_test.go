package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestAbsoluteExpiry(t *testing.T) {
	at := time.UnixMilli(1_900_000_000_123)
	tests := []struct {
		name string
		args []any
		want time.Time // zero: no absolute expiry
	}{
		{"pexpireat", []any{"pexpireat", "k", at.UnixMilli()}, at},
		{"expireat", []any{"EXPIREAT", "k", at.Unix()}, at.Truncate(time.Second)},
		{"set pxat", []any{"set", "k", "v", "pxat", at.UnixMilli()}, at},
		{"set exat", []any{"set", "k", "v", "nx", "EXAT", at.Unix()}, at.Truncate(time.Second)},
		{"getex pxat", []any{"getex", "k", "pxat", at.UnixMilli()}, at},
		{"pexpire is relative", []any{"pexpire", "k", int64(1000)}, time.Time{}},
		{"set with px", []any{"set", "k", "v", "px", int64(1000)}, time.Time{}},
		{"value named pxat", []any{"set", "k", "pxat"}, time.Time{}},
		{"not a number", []any{"pexpireat", "k", "soon"}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := absoluteExpiry(tt.args)
			if ok != !tt.want.IsZero() || !got.Equal(tt.want) {
				t.Errorf("absoluteExpiry(%v) = %v, %v; want %v", tt.args, got, ok, tt.want)
			}
		})
	}
}

// recordingTB records Errorf instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestExpiryGuard: on a client of the test Redis, an absolute expiry in
// the past fails the test, in a pipeline too; one in the future does not.
func TestExpiryGuard(t *testing.T) {
	ctx := context.Background()
	opts, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts) // not Client: its own guard would fail this test
	t.Cleanup(func() { _ = c.Close() })
	prefix := Prefix(t, Client(t))
	rec := &recordingTB{TB: t}
	c.AddHook(expiryGuard{tb: rec, now: time.Now})

	c.Set(ctx, prefix+"k", "v", 0)
	c.PExpireAt(ctx, prefix+"k", time.Now().Add(time.Hour))
	if len(rec.errors) != 0 {
		t.Fatalf("expiry in the future reported: %q", rec.errors)
	}
	c.PExpireAt(ctx, prefix+"k", time.Now().Add(-time.Hour))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetArgs(ctx, prefix+"k", "v", redis.SetArgs{ExpireAt: time.Now().Add(-time.Minute)})
		return nil
	})
	if len(rec.errors) != 2 {
		t.Errorf("%d reports of expiries in the past, want 2: %q", len(rec.errors), rec.errors)
	}
}
