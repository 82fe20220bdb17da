package adminapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/bantest"
	"github.com/ratewarden/ratewarden/internal/testkit/eventschema"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	bansTopic   = "ratelimit.bans"
	schemaToken = "schema-token"
)

// Manual bans and an unban through the admin API, as the limiter wires it
// (the real Redis blacklist, the ban topic on an embedded broker, the
// limiter's ban set): the limiter denies the banned subjects at once and
// lets the unbanned one through, and the answers and the ban topic's
// messages pass deploy/schemas/ban.schema.json (hostile strings, an IPv6
// address banned as its /64).
func TestSchemaAdminBans(t *testing.T) {
	banSchema, err := eventschema.Compile("../../deploy/schemas/ban.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	broker := kafkatest.StartBroker(t, bansTopic)
	banPub, err := kafkabus.NewBanPublisher(broker.Brokers(), bansTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = banPub.Close() })
	bans := limiter.NewBanSet(prometheus.NewRegistry())
	svc, _ := newLimiter(t, rdb, prefix, bans)
	log := zap.NewNop()
	srv := httptest.NewServer(adminapi.New(adminapi.Config{
		Gate:         bearer.NewGate("admin", "ratewarden admin", []string{schemaToken}, log, prometheus.NewRegistry()),
		Blacklist:    redisfleet.NewBlacklist(rdb, prefix),
		BanPublisher: banPub,
		Bans:         bans,
		BanGrouping:  func() int { return svc.Rules().Detection().IPv6Prefix },
		UserKey:      func(id string) string { return svc.Rules().UserKey(id) },
		Log:          log,
	}))
	t.Cleanup(srv.Close)
	admin := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+schemaToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}

	const banned = "198.51.100.9"
	adminBodies := map[string][]byte{}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/admin/bans", `{"scope":"ip","subject":"` + banned + `","duration":"1h","reason":"incident 42: <b>\"é\"</b>"}`},
		{"POST", "/v1/admin/bans", `{"scope":"user","subject":"mallory \"é\" 🎉","duration":"90s"}`},
		{"POST", "/v1/admin/bans", `{"scope":"ip","subject":"2001:db8:77::5","duration":"1h"}`}, // bans 2001:db8:77::/64
	} {
		code, body := admin(c.method, c.path, c.body)
		if code != http.StatusCreated {
			t.Fatalf("%s %s %s: %d %s", c.method, c.path, c.body, code, body)
		}
		adminBodies[c.body] = body
	}
	if r := decide(svc, rules.Request{IP: banned, Endpoint: "/api/fixed/a"}); r.Reason != "banned" {
		t.Fatalf("banned ip: %+v", r)
	}
	if r := decide(svc, rules.Request{IP: "203.0.113.10", Endpoint: "/elsewhere", UserID: "mallory \"é\" 🎉"}); r.Reason != "banned" {
		t.Fatalf("banned user: %+v", r)
	}
	if r := decide(svc, rules.Request{IP: "2001:db8:77::ffff", Endpoint: "/api/fixed/a"}); r.Reason != "banned" {
		t.Fatalf("another address of the banned /64: %+v", r)
	}
	code, body := admin("DELETE", "/v1/admin/bans/ip/"+url.PathEscape(banned), "")
	if code != http.StatusOK {
		t.Fatalf("unban: %d %s", code, body)
	}
	adminBodies["unban"] = body
	if r := decide(svc, rules.Request{IP: banned, Endpoint: "/other"}); r.Reason != "no_rule" {
		t.Fatalf("after the unban: %+v", r)
	}

	t.Run("admin responses", func(t *testing.T) {
		for req, body := range adminBodies {
			if err := banSchema.Validate(body); err != nil {
				t.Errorf("answer to %s: %s\n%v", req, body, err)
			}
		}
	})

	bansRead := kafkatest.ReadMessages(t, broker.Brokers(), bansTopic, 4, 30*time.Second)
	t.Run("ban topic", func(t *testing.T) {
		if n := kafkatest.CountMessages(t, broker.Brokers(), bansTopic); n != 4 {
			t.Errorf("%d messages on %s, want 4 from the admin API", n, bansTopic)
		}
		seen := bantest.Kinds(t, banSchema, bansRead)
		for _, want := range []string{"admin ban ip", "admin ban user", "admin unban ip", "reason manual", "admin ban ipv6 prefix"} {
			if seen[want] == 0 {
				t.Errorf("no %q among the ban messages: %v", want, seen)
			}
		}
		t.Logf("%d ban messages checked: %v", len(bansRead), seen)
	})
}
