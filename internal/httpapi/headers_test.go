package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// RateLimit-Policy is bounded whatever applies: 200 rules of 8 limits
// with 64-character ids made a 142 KB header (and a 14 MB answer to a
// batch asking for headers). Past maxPolicyBytes only the binding limit's
// policy is listed still, wherever it stands.
func TestPolicyHeaderBounded(t *testing.T) {
	for _, enforced := range []int{0, 100, 199} {
		t.Run(fmt.Sprint(enforced), func(t *testing.T) {
			d := &limiter.Decision{Enforced: enforced, Allowed: true}
			for i := range 200 {
				r := &rules.Rule{ID: fmt.Sprintf("%s-%03d", strings.Repeat("r", 60), i)}
				var limits []decide.Limit
				for j := range 8 {
					limits = append(limits, decide.Limit{Requests: 1000, Per: time.Duration(j+1) * time.Minute})
				}
				d.Applied = append(d.Applied, rules.Applied{Rule: r, Call: decide.Call{Limits: limits}})
				d.Results = append(d.Results, decide.Result{Allowed: true, Limit: 1000, Remaining: 10, LimitIndex: 3})
			}
			h := http.Header{}
			setRateLimitHeaders(h, d)
			policy := h.Get("Ratelimit-Policy")
			binding := fmt.Sprintf(`"%s-%03d/4m";q=1000;w=240`, strings.Repeat("r", 60), enforced)
			if len(policy) > maxPolicyBytes+len(binding)+2 {
				t.Errorf("RateLimit-Policy of %d bytes, over %d and the binding policy", len(policy), maxPolicyBytes)
			}
			if !strings.Contains(policy, binding) {
				t.Errorf("RateLimit-Policy lacks the binding limit's %s", binding)
			}
			if !strings.Contains(h.Get("Ratelimit"), fmt.Sprintf(`"%s-%03d/4m";r=10`, strings.Repeat("r", 60), enforced)) {
				t.Errorf("RateLimit %q does not name the binding limit", h.Get("Ratelimit"))
			}
		})
	}
}
