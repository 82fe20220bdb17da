package rules

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/endpoint"
)

// The spellings of a path a client could use to slip past a rule all
// normalize to one its pattern matches.
func TestNormalizedBypassesMatchTheRule(t *testing.T) {
	p := mustCompilePattern("/api/login")
	for _, raw := range []string{"/api//login", "/api/%6Cogin", "/api/./login", "/x/../api/login", "/api/login/", "/api/login?a=b", "/api%2flogin", "//api///login//",
		"/api/login;jsessionid=1", "/api;x/login", "/x/..;/api/login", "/api/login%3bx"} {
		t.Run(raw, func(t *testing.T) {
			if !p.Match(endpoint.Normalize(raw)) {
				t.Errorf("%q normalizes to %q, which escapes /api/login", raw, endpoint.Normalize(raw))
			}
		})
	}
}
