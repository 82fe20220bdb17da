package adminapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
)

// A ban of a duration out of bounds is refused with the bounds written as
// the rules file writes durations: 8760h, not 8760h0m0s.
func TestBanDurationBoundsAsWritten(t *testing.T) {
	log := zap.NewNop()
	h := &handler{cfg: Config{Gate: bearer.NewGate("admin", "ratewarden admin", []string{"s3cret"}, log, prometheus.NewRegistry()),
		Log: log, Blacklist: emptyBlacklist{}},
		limit: newSourceLimiter(sourceRate, sourceBurst, maxSources, newFakeClock().now)}
	r := httptest.NewRequest(http.MethodPost, "/v1/admin/bans",
		strings.NewReader(`{"scope": "ip", "subject": "203.0.113.9", "duration": "9000h", "reason": "test"}`))
	r.RemoteAddr = "203.0.113.5:4000"
	r.Header.Set("Authorization", "Bearer s3cret")
	w := httptest.NewRecorder()
	h.routes().ServeHTTP(w, r)
	if body := w.Body.String(); w.Code != http.StatusBadRequest || !strings.Contains(body, "between 1s and 8760h,") {
		t.Fatalf("a ban of 9000h: %d %s; want 400 naming the bounds 1s and 8760h", w.Code, body)
	}
}
