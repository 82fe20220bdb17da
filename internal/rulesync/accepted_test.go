package rulesync_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// After a refused load, the next load that is not refused sets the
// last-reload gauge back to 1 and logs that the source is accepted again,
// whether it brings new content, the content in force again (the bad edit
// undone: nothing to apply) or comes from a SIGHUP. Otherwise the reload
// alert keeps firing on a file that is fine.
func TestRefusedSourceAcceptedAgain(t *testing.T) {
	badFile := strings.Replace(fileRules, "fixed_window", "fixed_windw", 1)
	newFile := strings.Replace(fileRules, "requests: 100", "requests: 300", 1)
	badRLS := strings.Replace(messagingConfig, "unit: day", "unit: fortnight", 1)
	tests := []struct {
		name   string
		source string
		// bad, good: the content refused, then the content that follows.
		bad, good string
		force     bool // the reload after the fix is a SIGHUP's
	}{
		{"file restored, polled", rulesync.SourceFile, badFile, fileRules, false},
		{"file restored, SIGHUP", rulesync.SourceFile, badFile, fileRules, true},
		{"file changed, polled", rulesync.SourceFile, badFile, newFile, false},
		{"file deleted then restored", rulesync.SourceFile, "", fileRules, false},
		{"rls restored, polled", rulesync.SourceRLS, badRLS, messagingConfig, false},
		{"rls restored, SIGHUP", rulesync.SourceRLS, badRLS, messagingConfig, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := startRLS(t, messagingConfig)
			path, reload, accepted := l.View().File, l.ReloadFile, "rules file accepted again"
			if tt.source == rulesync.SourceRLS {
				path, reload, accepted = filepath.Join(l.dir, "config.yaml"), l.ReloadRLS, "RLS config accepted again"
			}
			if tt.bad == "" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFile(t, path, tt.bad)
			}
			if err := reload(false); err == nil {
				t.Fatal("the bad content was not refused")
			}
			gauge := func() float64 { return testutil.ToFloat64(l.LastReloadSuccessfulMetric(tt.source)) }
			if g := gauge(); g != 0 {
				t.Fatalf("last reload successful after the refusal = %v; want 0", g)
			}
			writeFile(t, path, tt.good)
			if err := reload(tt.force); err != nil {
				t.Fatalf("reload of the fixed content: %v", err)
			}
			if g := gauge(); g != 1 {
				t.Errorf("last reload successful after the fix = %v; want 1", g)
			}
			if n := l.logs.FilterMessage(accepted).Len(); n != 1 {
				t.Errorf("%q logged %d times, want once", accepted, n)
			}
			// Accepted once: the following polls and SIGHUPs say nothing more.
			if err := reload(false); err != nil {
				t.Fatal(err)
			}
			if err := reload(true); err != nil {
				t.Fatal(err)
			}
			if n := l.logs.FilterMessage(accepted).Len(); n != 1 || gauge() != 1 {
				t.Errorf("after more reloads: %q logged %d times, gauge %v; want once, 1", accepted, n, gauge())
			}
		})
	}
}
