package rulesync_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// FINDING (reproduces a defect; this test fails until it is fixed): a rules
// file refused only because it does not compile with the RLS directory of
// the moment (a duplicate id) is remembered by its hash and skipped on every
// poll, so once the directory changes and the two would compile together,
// the file on disk never applies: the limiter keeps running the old file
// until the next SIGHUP or file edit. A limiter that read the directory
// first runs the new file: the fleet diverges indefinitely.
func TestAttackFileRefusedByRLSSticksAfterRLSChanges(t *testing.T) {
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
