package rules

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const carryRules = `
rules:
  - id: api
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1m}]
    tiers: {GOLD: [{requests: 500, per: 1m}]}
    lease: true
  - id: login
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1m}]
    penalty: 5m
`

// TestCarry: a rule set recompiled from the same file carries every call's
// state over, onto its own compiled limits; a change carries nothing of
// what it changed, and everything else.
func TestCarry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	prev := mustCompile(t, carryRules)
	calls := func(s *Set) map[string]Applied { // by rule and tier
		out := map[string]Applied{}
		for _, tier := range []string{"", "GOLD"} {
			for _, ep := range []string{"/api/x", "/login"} {
				req := request("192.0.2.1", ep)
				req.Tier = tier
				for _, a := range s.Match(req, now, nil) {
					out[a.Rule.ID+"/"+tier] = a
				}
			}
		}
		return out
	}
	old := calls(prev)
	for _, tc := range []struct {
		name, from, to string
		carried        []string // rule/tier whose state stays
	}{
		{"recompiled", "", "", []string{"api/", "api/GOLD", "login/", "login/GOLD"}},
		{"a tier's limit", "GOLD: [{requests: 500", "GOLD: [{requests: 600", []string{"api/", "login/", "login/GOLD"}},
		{"the base limit", "limits: [{requests: 100", "limits: [{requests: 200", []string{"api/GOLD", "login/", "login/GOLD"}},
		{"a penalty", "penalty: 5m", "penalty: 6m", []string{"api/", "api/GOLD"}},
		{"a lease off", "lease: true", "lease: false", []string{"login/", "login/GOLD"}},
		{"a rule renamed", "id: login", "id: signin", []string{"api/", "api/GOLD"}},
		{"the match only", `["/login"]`, `["/login", "/signin"]`, []string{"api/", "api/GOLD", "login/", "login/GOLD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := mustCompile(t, strings.Replace(carryRules, tc.from, tc.to, 1))
			carry := next.Carry(prev)
			now := calls(next)
			for name, a := range old {
				limits, ok := carry(a.Call.Keys.State, a.Call.Limits)
				want := slices.Contains(tc.carried, name)
				if ok != want {
					t.Fatalf("%s: carried %v, want %v", name, ok, want)
				}
				if ok && &limits[0] != &now[name].Call.Limits[0] {
					t.Fatalf("%s: carried onto %v, not the new set's own limits of the call", name, limits)
				}
			}
		})
	}
	if _, ok := mustCompile(t, carryRules).Carry(prev)("other:{api|ip=1}:fw", old["api/"].Call.Limits); ok {
		t.Fatal("a key under another prefix was carried")
	}
}
