package rules

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Left out, each outcome scenario is on with the defaults; present, its
// statuses default when left out, and enabled: false turns it off without
// checking the rest.
func TestOutcomeScenarioDefaults(t *testing.T) {
	f := mustParse(t, "rules: []\n")
	d := f.Detection
	if d.CredentialStuffing.DistinctUsers != 10 || d.CredentialStuffing.Within.Std() != 10*time.Minute ||
		d.CredentialStuffing.Duration.Std() != time.Hour || !slices.Equal(d.CredentialStuffing.Statuses, []int{401, 403}) {
		t.Errorf("credential_stuffing defaults: %+v", *d.CredentialStuffing)
	}
	if d.BruteForce.Failures != 20 || d.BruteForce.Within.Std() != 5*time.Minute || !slices.Equal(d.BruteForce.Statuses, []int{401, 403}) {
		t.Errorf("brute_force defaults: %+v", *d.BruteForce)
	}
	if d.AccountAttack.DistinctSources != 10 || d.AccountAttack.Within.Std() != 10*time.Minute || d.AccountAttack.LockAccount != 0 {
		t.Errorf("account_attack defaults: %+v", *d.AccountAttack)
	}
	if d.Probing.DistinctEndpoints != 20 || d.Probing.Within.Std() != time.Minute || !slices.Equal(d.Probing.Statuses, []int{404}) {
		t.Errorf("probing defaults: %+v", *d.Probing)
	}
	for name, on := range map[string]bool{"credential_stuffing": d.CredentialStuffing.On(), "brute_force": d.BruteForce.On(),
		"account_attack": d.AccountAttack.On(), "probing": d.Probing.On()} {
		if !on {
			t.Errorf("%s is off by default", name)
		}
	}

	f = mustParse(t, `rules: []
detection:
  brute_force: {failures: 5, within: 1m, duration: 10m, endpoints: ["/api/login"], dry_run: true}
  probing: {enabled: false}
  account_attack: {distinct_sources: 3, within: 1m, duration: 1h, lock_account: 15m, statuses: [401]}
`)
	d = f.Detection
	if b := d.BruteForce; b.Failures != 5 || !slices.Equal(b.Statuses, []int{401, 403}) || !b.DryRun || !slices.Equal(b.Endpoints, []string{"/api/login"}) {
		t.Errorf("brute_force: %+v", *b)
	}
	if d.Probing.On() {
		t.Error("probing: enabled: false is on")
	}
	if a := d.AccountAttack; a.LockAccount.Std() != 15*time.Minute || !slices.Equal(a.Statuses, []int{401}) {
		t.Errorf("account_attack: %+v", *a)
	}
}

func TestOutcomeScenarioErrors(t *testing.T) {
	tests := []struct{ name, detection, want string }{
		{"zero threshold", "credential_stuffing: {distinct_users: 0, within: 1m, duration: 1h}", "detection.credential_stuffing.distinct_users: must be between 1 and 10000"},
		{"threshold too large", "brute_force: {failures: 10001, within: 1m, duration: 1h}", "detection.brute_force.failures: must be between 1 and 10000"},
		{"no window", "probing: {distinct_endpoints: 3, duration: 1h}", "detection.probing.within: must be at least 1ms"},
		{"no duration", "account_attack: {distinct_sources: 3, within: 1m}", "detection.account_attack.duration: must be at least 1ms"},
		{"empty statuses", "brute_force: {failures: 3, within: 1m, duration: 1h, statuses: []}", "detection.brute_force.statuses: must list at least one"},
		{"bad status", "brute_force: {failures: 3, within: 1m, duration: 1h, statuses: [401, 600]}", "detection.brute_force.statuses[1]: 600 is not an HTTP status"},
		{"bad endpoint", "probing: {distinct_endpoints: 3, within: 1m, duration: 1h, endpoints: [\"no-slash\"]}", "detection.probing.endpoints[0]"},
		{"negative lock", "account_attack: {distinct_sources: 3, within: 1m, duration: 1h, lock_account: -1s}", "detection.account_attack.lock_account: must not be negative"},
		{"ipv4 network too wide", "account_attack: {ipv4_prefix: 8}", "detection.account_attack.ipv4_prefix: must be between 16 and 32"},
		{"ipv6 network too wide", "account_attack: {ipv6_prefix: 16}", "detection.account_attack.ipv6_prefix: must be between 32 and 128"},
		{"success is a failure", "account_attack: {statuses: [401, 200], success_statuses: [200, 302]}", "detection.account_attack.success_statuses[0]: 200 is also a failure status"},
		{"success is no status", "account_attack: {success_statuses: [99]}", "detection.account_attack.success_statuses[0]: 99 is not an HTTP status"},
		{"no success", "account_attack: {success_statuses: []}", "detection.account_attack.success_statuses: must list at least one"},
		{"no success method", "account_attack: {success_methods: []}", "detection.account_attack.success_methods: must list at least one"},
		{"success method", "account_attack: {success_methods: [POST, \"GE T\"]}", "detection.account_attack.success_methods[1]: \"GE T\" is not an HTTP method token"},
		{"unknown field", "brute_force: {failure: 3, within: 1m, duration: 1h}", `line 2: unknown key "failure" (did you mean "failures"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("rules: []\ndetection: {" + strings.TrimSpace(tt.detection) + "}\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Parse([]byte("rules: []\ndetection: {brute_force: {enabled: false, failures: 0}}\n")); err != nil {
		t.Errorf("a disabled scenario is checked: %v", err)
	}
}

// An account attack counts sources in IPv4 /32s and IPv6 /48s unless told
// otherwise, never in IPv6 networks narrower than a source; its owner is
// shown by a 2xx that is no failure, or by success_statuses.
func TestAccountAttackNetworksAndSuccess(t *testing.T) {
	d := mustParse(t, "rules: []\n").Detection.WithDefaults()
	if v4, v6 := d.AccountAttack.Networks(d.IPv6Prefix); v4 != 32 || v6 != 48 {
		t.Errorf("default networks /%d, /%d; want /32, /48", v4, v6)
	}
	d = mustParse(t, "rules: []\ndetection: {ipv6_prefix: 40, account_attack: {distinct_sources: 10, within: 10m, duration: 1h, ipv4_prefix: 24, ipv6_prefix: 56}}\n").Detection.WithDefaults()
	if v4, v6 := d.AccountAttack.Networks(d.IPv6Prefix); v4 != 24 || v6 != 40 {
		t.Errorf("networks /%d, /%d; want /24 and the sources' /40", v4, v6)
	}
	a := d.AccountAttack
	for status, want := range map[int]bool{200: true, 204: true, 299: true, 302: false, 401: false, 404: false, 500: false} {
		if a.SuccessStatus(status) != want {
			t.Errorf("default: SuccessStatus(%d) = %v", status, !want)
		}
	}
	a = mustParse(t, "rules: []\ndetection: {account_attack: {distinct_sources: 10, within: 10m, duration: 1h, statuses: [200], success_statuses: [302, 303]}}\n").Detection.WithDefaults().AccountAttack
	for status, want := range map[int]bool{200: false, 204: false, 302: true, 303: true} {
		if a.SuccessStatus(status) != want {
			t.Errorf("form login: SuccessStatus(%d) = %v", status, !want)
		}
	}
	a = mustParse(t, "rules: []\ndetection: {account_attack: {distinct_sources: 10, within: 10m, duration: 1h, statuses: [200, 401]}}\n").Detection.WithDefaults().AccountAttack
	if a.SuccessStatus(200) || !a.SuccessStatus(201) {
		t.Error("a failure status of 200 is still a success")
	}
}

// The owner is shown by a success answering a method that is not safe (a
// login), or one of success_methods: a GET of the login form is none.
func TestAccountAttackSuccessMethods(t *testing.T) {
	a := mustParse(t, "rules: []\n").Detection.WithDefaults().AccountAttack
	for method, want := range map[string]bool{"POST": true, "post": true, "PUT": true, "PATCH": true, "DELETE": true,
		"GET": false, "get": false, "": false, "HEAD": false, "OPTIONS": false, "TRACE": false} {
		if a.SuccessMethod(method) != want {
			t.Errorf("default: SuccessMethod(%q) = %v", method, !want)
		}
	}
	a = mustParse(t, "rules: []\ndetection: {account_attack: {distinct_sources: 10, within: 10m, duration: 1h, success_methods: [get, POST]}}\n").Detection.WithDefaults().AccountAttack
	for method, want := range map[string]bool{"GET": true, "": true, "POST": true, "PUT": false, "HEAD": false} {
		if a.SuccessMethod(method) != want {
			t.Errorf("basic auth: SuccessMethod(%q) = %v", method, !want)
		}
	}
}

func TestEndpointSet(t *testing.T) {
	s, err := CompileEndpoints([]string{"/api/login", "/api/auth/**"})
	if err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]bool{"/api/login": true, "/api/auth/x/y": true, "/api/books": false} {
		if got := s.Match(ep); got != want {
			t.Errorf("Match(%q) = %v, want %v", ep, got, want)
		}
	}
	if !(EndpointSet{}).Match("/anything") {
		t.Error("an empty set matches nothing")
	}
}
