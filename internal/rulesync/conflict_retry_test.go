package rulesync_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// A rules file refused only because it does not compile with the RLS
// directory of the moment (a duplicate id) is tried again once the
// directory changes: when the two compile together, the file on disk
// applies, as a restarted limiter would run it, rather than the old file
// running until the next SIGHUP or file edit (a fleet whose limiters read
// the two in another order would diverge).
func TestFileRefusedForAConflictIsRetriedWhenTheDirectoryChanges(t *testing.T) {
	l := startRLS(t, messagingConfig)
	l.run(t, nil)
	file := l.View().File
	// The file gains a rule whose id the directory already has: refused.
	writeFile(t, file, fileRules+`
  - id: `+toNumber+`
    algorithm: fixed_window
    limits: [{requests: 7, per: 1s}]
    descriptor: {domain: other, entries: [{key: k}]}
`)
	testkit.WaitFor(t, 2*time.Second, "the file to be refused", func() bool {
		return l.logs.FilterMessage("rules file refused; the running rules stay").Len() > 0
	})
	// The directory drops that rule: file and directory now compile together.
	writeFile(t, filepath.Join(l.dir, "config.yaml"), strings.Replace(messagingConfig, "  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n", "", 1))
	testkit.WaitFor(t, 2*time.Second, "the directory to apply", func() bool {
		_, ok := l.source("rls.messaging.message_type_marketing.to_number")
		r, _ := l.source(toNumber)
		return ok && r.Source != "rls_config"
	})
	// What a restarted limiter would run: the file's rule toNumber.
	time.Sleep(500 * time.Millisecond) // 10 file polls
	if got := l.limit(toNumber); got != 7 {
		t.Errorf("rule %s limit %d after the directory changed, want 7 (the file on disk, as a restart runs it)", toNumber, got)
	}
}

// extraConfig is a directory file whose one rule, rls.extra.k, a rules
// file may also name.
const extraConfig = `
domain: extra
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 9}
`

// fileRuleNamed is a rule of the rules file with the id id (a domain of
// its own, so that only the id can clash) and limit requests.
func fileRuleNamed(id, requests string) string {
	return `
  - id: ` + id + `
    algorithm: fixed_window
    limits: [{requests: ` + requests + `, per: 1s}]
    descriptor: {domain: other, entries: [{key: k}]}
`
}

// The reverse: a directory refused only because a rule of the rules file
// has the id of one of its rules is tried again once the file changes.
func TestDirectoryRefusedForAConflictIsRetriedWhenTheFileChanges(t *testing.T) {
	l := startRLS(t, messagingConfig)
	l.run(t, nil)
	file := l.View().File
	writeFile(t, file, fileRules+fileRuleNamed("rls.extra.k", "7"))
	testkit.WaitFor(t, 2*time.Second, "the file to apply", func() bool { return l.limit("rls.extra.k") == 7 })
	// The directory gains a rule of that id: refused.
	writeFile(t, filepath.Join(l.dir, "extra.yaml"), extraConfig)
	testkit.WaitFor(t, 2*time.Second, "the directory to be refused", func() bool {
		return l.logs.FilterMessage("RLS config refused; the running rules stay").Len() > 0
	})
	// The file drops it: file and directory now compile together.
	writeFile(t, file, fileRules)
	deadline := time.Now().Add(3 * time.Second) // 60 polls
	for time.Now().Before(deadline) && l.limit("rls.extra.k") != 9 {
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.limit("rls.extra.k"); got != 9 {
		t.Errorf("rule rls.extra.k limit %d after the file changed, want 9 (the directory on disk, as a restart runs it)", got)
	}
	if r, _ := l.source("rls.extra.k"); r.Source != "rls_config" {
		t.Errorf("rule rls.extra.k from %q, want rls_config", r.Source)
	}
}

// An RLS config from xDS refused only for a conflict with the rules file
// is tried again once the file changes: the management server does not
// send a config it was refused again, so without that the limiter would
// run without it until the server publishes another.
func TestXDSConfigRefusedForAConflictIsRetriedWhenTheFileChanges(t *testing.T) {
	l := startRLS(t, "", fromXDS)
	file := l.View().File
	writeFile(t, file, fileRules+fileRuleNamed(toNumber, "7"))
	if err := l.ReloadFile(false); err != nil {
		t.Fatal(err)
	}
	l.run(t, nil)
	messaging := mustLoad(t, rlsconfig.File{Name: "xds:messaging", Data: []byte(messagingConfig)})
	if _, err := l.SetRLS(messaging); err == nil {
		t.Fatal("a config with the id of a rule of the file was accepted")
	}
	if got := l.limit(toNumber); got != 7 {
		t.Fatalf("rule %s limit %d once the config is refused, want 7 (the file's)", toNumber, got)
	}
	writeFile(t, file, fileRules)
	deadline := time.Now().Add(3 * time.Second) // 60 polls
	for time.Now().Before(deadline) && l.limit(toNumber) != 100 {
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.limit(toNumber); got != 100 {
		t.Errorf("rule %s limit %d after the file changed, want 100 (the config from xDS)", toNumber, got)
	}
	if l.View().RLSHash != messaging.Hash[:12] {
		t.Errorf("RLS hash %q in the view, want the config's %q", l.View().RLSHash, messaging.Hash[:12])
	}
}
