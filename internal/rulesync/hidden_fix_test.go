package rulesync

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// A refused dynamic version is tried again on any change of the files'
// content, not only one that changes the rules in force: when the dynamic
// version in force overrides the very file rule the refused version
// conflicts with, fixing that rule in the file changes nothing in force
// (the override hides it), yet the refused version now compiles with the
// files and a restarted limiter runs it. Without the retry this instance
// would run version 1 until the store's version moves again, while its
// peers restarted since run version 2.
func TestRefusedVersionIsRetriedWhenAFileFixIsHiddenByAnOverride(t *testing.T) {
	tm := newTestMerger(t)
	legacyElsewhere, err := rules.ParseRuleJSON([]byte(`{"id": "legacy-key", "descriptor": {"domain": "other", "entries": [{"key": "api_key"}]},
		"algorithm": "fixed_window", "limits": [{"requests": 1000, "per": "1h"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v1 := &dynamicRules{version: 1, rules: []dynamicRule{{rule: legacyElsewhere, stored: StoredRule{ID: "legacy-key", Version: 1}}}}
	if err := tm.start(fileOf(t, mergeFile), nil, v1); err != nil {
		t.Fatal(err)
	}
	tm.check(t, 1, false, 0)
	// Version 2 drops the override and adds api-key: the file's legacy-key
	// is back on edge's api_key, which api-key cannot run beside.
	tm.putDynamic(apiKeyAt(t, 2))
	tm.check(t, 1, false, 2)
	// The operator moves the file's legacy-key off edge's api_key.
	fixed := strings.Replace(mergeFile, "domain: edge", "domain: old", 1)
	if _, err := rules.Compile(rules.Merge(fileOf(t, fixed).parsed, ruleList(apiKeyAt(t, 2).rules)), rules.Options{}); err != nil {
		t.Fatalf("version 2 does not fit the fixed file either: %v", err)
	}
	if _, _, err := tm.putFile(fileOf(t, fixed)); err != nil {
		t.Fatal(err)
	}
	if retried, wants := tm.retried(), tm.wants(2); !retried || !wants {
		t.Errorf("after a file change that version 2 fits: retried %v, wants(2) %v; want true, true (a restart runs version 2)",
			retried, wants)
	}
}
