package rulesync_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// countApplies counts the rule sets the Manager puts in force.
func countApplies(n *atomic.Int64) option {
	return func(c *rulesync.Config) {
		apply := c.Apply
		c.Apply = func(s *rules.Set) { n.Add(1); apply(s) }
	}
}

// fromXDS: the RLS config comes from SetRLS, not from a directory.
func fromXDS(c *rulesync.Config) { c.RLSDir, c.RLSFromXDS = "", true }

func (l *rlsLimiter) unchanged(source string) float64 {
	return testutil.ToFloat64(l.ReloadsMetric(source, "unchanged"))
}

func mustLoad(t *testing.T, files ...rlsconfig.File) *rlsconfig.Config {
	t.Helper()
	c, err := rlsconfig.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// An RLS config equal to the one in force, sent again (a management
// server re-publishing it under a new version), is accepted and not put in
// force again: the limiter keeps its rule set, leases and caches. So is one
// whose domains come in another order, which compiles to the same rules.
func TestEqualRLSConfigIsNotReapplied(t *testing.T) {
	var applies atomic.Int64
	l := startRLS(t, "", fromXDS, countApplies(&applies))
	other := rlsconfig.File{Name: "xds:other", Data: []byte("domain: other\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 3}}]\n")}
	messaging := rlsconfig.File{Name: "xds:messaging", Data: []byte(messagingConfig)}
	if changed, err := l.SetRLS(mustLoad(t, messaging, other)); err != nil || !changed {
		t.Fatalf("the first config: changed %v, %v", changed, err)
	}
	set, version := l.set.Load(), l.View().Version
	for range 20 {
		if changed, err := l.SetRLS(mustLoad(t, messaging, other)); err != nil || changed {
			t.Fatalf("the same config: changed %v, %v", changed, err)
		}
	}
	if changed, err := l.SetRLS(mustLoad(t, other, messaging)); err != nil || changed {
		t.Fatalf("the config reordered: changed %v, %v", changed, err)
	}
	if n := applies.Load(); n != 2 || l.set.Load() != set {
		t.Errorf("%d rule sets put in force, want 2 (the start's, the first config's)", n)
	}
	if n := l.unchanged(rulesync.SourceRLS); n != 21 {
		t.Errorf("rate_limit_rules_reloads_total{source=rls_config,result=unchanged} = %v, want 21", n)
	}
	if l.View().Version == version || !strings.HasSuffix(l.View().Version, l.View().RLSHash) {
		t.Errorf("version %q after the reordered config, was %q: want the new config's hash", l.View().Version, version)
	}

	raised := strings.Replace(messagingConfig, "requests_per_unit: 100", "requests_per_unit: 101", 1)
	if changed, err := l.SetRLS(mustLoad(t, rlsconfig.File{Name: "xds:messaging", Data: []byte(raised)}, other)); err != nil || !changed {
		t.Fatalf("a changed config: changed %v, %v", changed, err)
	}
	if n := applies.Load(); n != 3 || l.limit(toNumber) != 101 {
		t.Errorf("a changed config: %d rule sets put in force, limit %d; want 3, 101", n, l.limit(toNumber))
	}
}

// A rules file whose content changed but not its rules (a comment), and a
// SIGHUP with nothing changed, put nothing in force again.
func TestEqualRulesFileIsNotReapplied(t *testing.T) {
	var applies atomic.Int64
	l := startRLS(t, messagingConfig, countApplies(&applies))
	version := l.View().Version
	writeFile(t, l.View().File, "# the same rules\n"+fileRules)
	if err := l.ReloadFile(false); err != nil {
		t.Fatal(err)
	}
	if err := l.ReloadFile(true); err != nil { // SIGHUP, same content
		t.Fatal(err)
	}
	if err := l.ReloadRLS(true); err != nil {
		t.Fatal(err)
	}
	if n := applies.Load(); n != 1 {
		t.Errorf("%d rule sets put in force, want 1 (the start's)", n)
	}
	if l.View().Version == version {
		t.Error("the version does not name the new file content")
	}
	if f, r := l.unchanged(rulesync.SourceFile), l.unchanged(rulesync.SourceRLS); f != 2 || r != 1 {
		t.Errorf("unchanged loads: file %v, rls_config %v; want 2, 1", f, r)
	}
}

// An admin change that changes no rule in force (a rule put in shadow mode
// that already is, a dynamic rule stored again as it is) is stored and
// announced, and puts nothing in force again, here or on the limiters
// that poll it.
func TestAdminChangeThatChangesNothingIsNotReapplied(t *testing.T) {
	store := &memStore{rules: map[string]rulesync.StoredRule{}}
	var applies atomic.Int64
	l := startRLS(t, messagingConfig, withStore(store, 0), countApplies(&applies))
	who := rulesync.Author{Actor: "alice"}
	ctx := context.Background()
	if _, err := l.SetShadow(ctx, toNumber, false, who); err != nil { // not in shadow mode already
		t.Fatal(err)
	}
	res, err := l.SetShadow(ctx, toNumber, true, who)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SetShadow(ctx, toNumber, true, who); err != nil {
		t.Fatal(err)
	}
	if n := applies.Load(); n != 2 || !l.set.Load().Rule(toNumber).Shadow {
		t.Errorf("%d rule sets put in force, want 2 (the start's, the shadow mode's)", n)
	}
	if v := l.View().DynamicVersion; v != 3 || v == res.View.DynamicVersion {
		t.Errorf("dynamic version %d in force, want 3", v)
	}
	if n := l.unchanged(rulesync.SourceDynamic); n != 2 {
		t.Errorf("rate_limit_rules_reloads_total{source=dynamic,result=unchanged} = %v, want 2", n)
	}
}
