package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// An account attack counting the failures of the login endpoint, as
// docs/detection.md advises.
const loginOwnerRulesYAML = `
rules: []
detection:
  account_attack: {distinct_sources: 3, within: 10m, duration: 1h, endpoints: ["/api/login"]}
`

// A GET of the login form is no login: an application behind the client's
// middleware names in its reports the user its login form names (User
// reads the form, as a per-user failure budget needs it to), so a GET of
// /api/login?username=erin, answered 200 with the form, is reported as a
// 2xx naming erin. Four addresses that fetch the form that way and then
// fail on erin's password are still her attackers: all four are banned,
// none spared as her owner.
func TestAccountAttackLoginFormIsNoSuccess(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, loginOwnerRulesYAML)
	detector := e.start("detector")
	limiter := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + limiter.addr})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<form method=post><input name=username value=%q><input name=password></form>", r.FormValue("username"))
	})
	mux.HandleFunc("POST /api/login", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "wrong password", http.StatusUnauthorized)
	})
	app := httptest.NewServer(client.Middleware(c, client.MiddlewareConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		User:           func(r *http.Request) string { return r.FormValue("username") },
		Mux:            mux,
	})(mux))
	t.Cleanup(app.Close)
	send := func(req *http.Request, from string, want int) {
		t.Helper()
		req.Header.Set("X-Forwarded-For", from)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s from %s: %d, want %d", req.Method, req.URL.Path, from, resp.StatusCode, want)
		}
	}
	sources := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}
	for _, ip := range sources {
		req, _ := http.NewRequest(http.MethodGet, app.URL+"/api/login?username=erin", nil)
		send(req, ip, http.StatusOK)
	}
	testkit.WaitFor(t, 30*time.Second, "the detector to consume the form's 4 outcomes", func() bool {
		return detector.metric(t, "rate_limit_detector_events_total", `source="outcomes"`) >= 4
	})
	for _, ip := range sources {
		form := url.Values{"username": {"erin"}, "password": {"guess"}}.Encode()
		req, _ := http.NewRequest(http.MethodPost, app.URL+"/api/login", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		send(req, ip, http.StatusUnauthorized)
	}
	testkit.WaitFor(t, 30*time.Second, "the warning of the attack on erin", func() bool {
		return detector.metric(t, "rate_limit_detector_warnings_total", `source="outcomes"`, `reason="account_attack"`) >= 1
	})
	time.Sleep(time.Second) // the bans published with the warning
	n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic)
	banned := map[string]bool{}
	for _, b := range bans(t, e, int(n)) {
		switch {
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionBan && b.Scope == event.ScopeIP:
			banned[b.Subject] = true
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionWarn && b.Subject == "erin":
			if len(b.Evidence.SparedSources) != 0 {
				t.Errorf("the warning spares %v as erin's owner", b.Evidence.SparedSources)
			}
		default:
			t.Errorf("unexpected ban %+v", b)
		}
	}
	if len(banned) != len(sources) {
		t.Errorf("%d of %d sources banned (%v); spared: %v", len(banned), len(sources), banned,
			detector.metric(t, "rate_limit_detector_outcome_spared_total"))
	}
}
