package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	apiTokenA  = "0123456789abcdef0123456789abcdef"
	apiTokenB  = "fedcba9876543210fedcba9876543210"
	adminToken = "admin-token-0123456789abcdef"
)

// With API_TOKENS, every decision route answers 401 (with a Bearer
// challenge) unless the request carries one of the tokens, and decides with
// either; the admin API keeps its own token, which opens no decision route,
// and no API token opens the admin API.
func TestDecisionRoutesNeedAToken(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	s := newStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]"), rdb: rdb, prefix: prefix,
		configure: func(c *stackConfig) {
			c.APITokens = []string{apiTokenA, apiTokenB}
			c.AdminToken = adminToken
			c.Admin.Blacklist = redisfleet.NewBlacklist(rdb, prefix)
		}})
	check := func(header map[string]string) response {
		return s.do(http.MethodPost, "/v1/check", `{"ip":"198.51.100.1","endpoint":"/api/a"}`, header)
	}
	batch := func(header map[string]string) response { // its one decision, or its error
		b := s.batch(header, `{"ip":"198.51.100.1","endpoint":"/api/a"}`)
		r := response{Status: b.Status, Header: b.Header, Error: b.Error}
		if len(b.Decisions) == 1 {
			r = b.Decisions[0]
			r.Status, r.Header = b.Status, b.Header
		}
		return r
	}
	forwardAuth := func(header map[string]string) response {
		h := map[string]string{"X-Forwarded-Uri": "/api/a"}
		for k, v := range header {
			h[k] = v
		}
		return s.do(http.MethodGet, "/v1/auth", "", h)
	}
	envoyAuth := func(header map[string]string) response { return s.do(http.MethodGet, "/v1/auth/api/a", "", header) }
	bearer := func(t string) map[string]string { return map[string]string{"Authorization": "Bearer " + t} }
	for route, call := range map[string]func(map[string]string) response{"check": check, "batch": batch, "auth": forwardAuth, "auth/<path>": envoyAuth} {
		for _, tt := range []struct {
			name   string
			header map[string]string
			want   int
		}{
			{"no token", nil, 401},
			{"wrong token", bearer("0000000000000000" + apiTokenA[16:]), 401},
			{"prefix of a token", bearer(apiTokenA[:16]), 401},
			{"admin token", bearer(adminToken), 401},
			{"first token", bearer(apiTokenA), 200},
			{"second token", bearer(apiTokenB), 200},
		} {
			t.Run(route+"/"+tt.name, func(t *testing.T) {
				r := call(tt.header)
				if r.Status != tt.want {
					t.Fatalf("status %d (%+v), want %d", r.Status, r, tt.want)
				}
				if tt.want == 401 && (r.Header.Get("WWW-Authenticate") != `Bearer realm="ratewarden"` || r.Error == "" || r.Header.Get("RateLimit") != "") {
					t.Fatalf("401 without its challenge and error, or with a decision: %+v", r)
				}
				if tt.want == 200 && (r.Reason != "ok" || r.EventID == "") {
					t.Fatalf("no decision: %+v", r)
				}
			})
		}
	}
	if r := s.do(http.MethodGet, "/v1/admin/bans", "", bearer(apiTokenA)); r.Status != 401 {
		t.Fatalf("admin API with an API token: %d, want 401", r.Status)
	}
	if r := s.do(http.MethodGet, "/v1/admin/bans", "", bearer(adminToken)); r.Status != 200 {
		t.Fatalf("admin API with its token: %d, want 200", r.Status)
	}
	if got := s.metric("rate_limit_requests_total", nil); got != 8 {
		t.Fatalf("%v decisions counted, want the 8 authorized ones only", got)
	}
}
