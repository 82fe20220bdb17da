package rulesync_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// A rules file grown over MaxRulesFileSize is refused on reload, naming
// the file and the bound, and the running rules stay.
func TestRulesFileOverTheBoundIsRefusedOnReload(t *testing.T) {
	l := startRLS(t, messagingConfig)
	file := l.View().File
	if err := os.Truncate(file, rulesync.MaxRulesFileSize+1); err != nil {
		t.Fatal(err)
	}
	err := l.ReloadFile(false)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "16 MiB") {
		t.Errorf("reload of a file over the bound: %v; want an error naming it and the 16 MiB bound", err)
	}
	if got := l.limit("login"); got != 100 {
		t.Errorf("login limit %d after the refusal, want the running 100", got)
	}
}

// A poll leaves a file that stat says is as it was unread; SIGHUP reads
// it whatever stat says: a same-size rewrite in place that keeps the
// modification time, which stat cannot see, is taken on SIGHUP.
func TestSIGHUPReadsAFileStatSaysIsUnchanged(t *testing.T) {
	l := startRLS(t, messagingConfig)
	file := l.View().File
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(file, past, past); err != nil {
		t.Fatal(err)
	}
	if err := l.ReloadFile(false); err != nil { // read: the time moved
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(fileRules, "requests: 100", "requests: 300", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, past, past); err != nil {
		t.Fatal(err)
	}
	if err := l.ReloadFile(false); err != nil {
		t.Fatal(err)
	}
	if got := l.limit("login"); got != 100 {
		t.Fatalf("login limit %d after a poll; want 100 (stat says the file is as it was: not read)", got)
	}
	if err := l.ReloadFile(true); err != nil {
		t.Fatal(err)
	}
	if got := l.limit("login"); got != 300 {
		t.Errorf("login limit %d after SIGHUP, want 300", got)
	}
}
