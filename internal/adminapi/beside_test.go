package adminapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
)

// Beside serves the admin API and the decision API on one listener, each
// behind its own tokens: a path below Prefix goes to the admin API, which
// an API token does not open and the admin token does; every other path
// goes to the decision API as it came (an unclean one is not redirected),
// and the admin token opens none of them.
func TestBesideRoutesByPrefix(t *testing.T) {
	const (
		apiToken   = "0123456789abcdef0123456789abcdef"
		adminToken = "admin-token-0123456789abcdef"
	)
	log, reg := zap.NewNop(), prometheus.NewRegistry()
	var apiPaths []string
	api := bearer.NewGate("decisions", "ratewarden", []string{apiToken}, log, reg).Guard("/v1/auth",
		func(w http.ResponseWriter, r *http.Request) { apiPaths = append(apiPaths, r.URL.Path) })
	admin := New(Config{Gate: bearer.NewGate("admin", "ratewarden admin", []string{adminToken}, log, reg),
		Blacklist: emptyBlacklist{}, Log: log})
	h := Beside(api, admin)
	const unclean = "/v1/auth//api//b/../a"
	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"admin API with an API token", "/v1/admin/bans", apiToken, http.StatusUnauthorized},
		{"admin API with its token", "/v1/admin/bans", adminToken, http.StatusOK},
		{"decision route with the admin token", unclean, adminToken, http.StatusUnauthorized},
		{"decision route with an API token", unclean, apiToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.path, nil)
			r.Header.Set("Authorization", "Bearer "+tc.token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("GET %s: %d %s, want %d", tc.path, w.Code, w.Body, tc.want)
			}
		})
	}
	if len(apiPaths) != 1 || apiPaths[0] != unclean {
		t.Fatalf("the decision API was handed %q, want the one authorized call's path as sent", apiPaths)
	}
}
