package httpapi_test

import (
	"net/http"
	"testing"
)

const (
	apiTokenA = "0123456789abcdef0123456789abcdef"
	apiTokenB = "fedcba9876543210fedcba9876543210"
	// adminToken is the admin API's token, which opens no decision route
	// (adminapi's tests: nor does an API token open the admin API).
	adminToken = "admin-token-0123456789abcdef"
)

// With API_TOKENS, every decision route answers 401 (with a Bearer
// challenge) unless the request carries one of the tokens, and decides with
// either.
func TestDecisionRoutesNeedAToken(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]"),
		configure: func(c *stackConfig) { c.APITokens = []string{apiTokenA, apiTokenB} }})
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
	if got := s.fixed.decided.Load(); got != 8 {
		t.Fatalf("%v decisions counted, want the 8 authorized ones only", got)
	}
}
