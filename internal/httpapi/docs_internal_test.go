package httpapi

import (
	"os"
	"strings"
	"testing"
)

// gatedPaths are the routes the bearer gate (API_TOKENS) guards: those
// NewFastHandler serves and forward-auth. A token opens every one of them,
// so the operators deciding who holds one must find each in the security
// page and in API_TOKENS' help (docs/configuration.md is written from it).
var gatedPaths = []string{checkPath, batchPath, reportPath, reportBatchPath, jsonPath, authPath}

func TestDocsNameEveryGatedRoute(t *testing.T) {
	security, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var apiTokens string
	for line := range strings.SplitSeq(string(config), "\n") {
		if strings.HasPrefix(line, "| `API_TOKENS` |") {
			apiTokens = line
		}
	}
	if apiTokens == "" {
		t.Fatal("docs/configuration.md has no API_TOKENS row")
	}
	for _, path := range gatedPaths {
		if !strings.Contains(string(security), "`"+path+"`") && !strings.Contains(string(security), "`POST "+path+"`") {
			t.Errorf("docs/security.md does not name %s", path)
		}
		if !strings.Contains(apiTokens, "`"+path+"`") && !strings.Contains(apiTokens, "`POST "+path+"`") {
			t.Errorf("API_TOKENS' help does not name %s", path)
		}
	}
	// What a report can do is why its token matters.
	for _, what := range []string{"account_attack", "lock_account", "brute_force", "credential_stuffing", "probing"} {
		if !strings.Contains(string(security), what) {
			t.Errorf("docs/security.md does not say what a report can do through %s", what)
		}
	}
}
