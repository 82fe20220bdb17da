package adminclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const token = "adminclient-test-token-0123456789"

// adminAPI serves the limiters' admin API over the test's Redis and an
// embedded broker, as a limiter does, and returns its URL.
func adminAPI(t *testing.T) string {
	t.Helper()
	broker := kafkatest.StartBroker(t, "bans")
	publisher, err := kafkabus.NewBanPublisher(broker.Brokers(), "bans")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })
	client := redistest.Client(t)
	log := zap.NewNop()
	srv := httptest.NewServer(adminapi.New(adminapi.Config{
		Gate:      bearer.NewGate("admin", "ratewarden admin", []string{token}, log, prometheus.NewRegistry()),
		Blacklist: redisfleet.NewBlacklist(client, redistest.Prefix(t, client)), BanPublisher: publisher, Log: log,
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A ban, its listing, a longer ban kept, a refused input with the admin
// API's own message, a lift, and a lift of nothing.
func TestClientAgainstTheAdminAPI(t *testing.T) {
	c := New(adminAPI(t), token, 10*time.Second)
	ctx := context.Background()
	b, written, err := c.Ban(ctx, "ip", "198.51.100.4", time.Hour, "incident 9", "ana")
	if err != nil || !written || b.Actor != "ana" || b.Note != "incident 9" || b.Source != "admin" {
		t.Fatalf("ban: %+v %v %v", b, written, err)
	}
	if _, written, err := c.Ban(ctx, "ip", "198.51.100.4", time.Minute, "shorter", "bo"); err != nil || written {
		t.Fatalf("a shorter ban: written %v, %v; want the longer one kept", written, err)
	}
	bans, err := c.Bans(ctx)
	if err != nil || len(bans) != 1 || bans[0].Subject != "198.51.100.4" || bans[0].Action != event.ActionBan {
		t.Fatalf("bans: %+v %v", bans, err)
	}
	_, _, err = c.Ban(ctx, "planet", "x", time.Hour, "", "ana")
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Message != "scope: ip or user" {
		t.Fatalf("a bad scope: %v", err)
	}
	if err := c.Lift(ctx, "ip", "198.51.100.4", "false positive & more", "ana"); err != nil {
		t.Fatal(err)
	}
	if err := c.Lift(ctx, "ip", "198.51.100.4", "again", "ana"); !errors.Is(err, ErrNotBanned) {
		t.Fatalf("a second lift: %v, want ErrNotBanned", err)
	}
	if bans, err := c.Bans(ctx); err != nil || len(bans) != 0 {
		t.Fatalf("bans after the lift: %+v %v", bans, err)
	}
	if _, err := New(adminAPI(t), "wrong-token-0123456789", time.Second).Bans(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %v", err)
	}
}
