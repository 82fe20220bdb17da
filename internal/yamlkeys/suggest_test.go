package yamlkeys

import (
	"strings"
	"testing"
)

var ruleKeys = []string{"id", "priority", "match", "key", "algorithm", "limits", "penalty", "shadow",
	"on_redis_failure", "debit", "spent_by", "statuses", "tiers", "schedule", "escalate", "lease", "ipv6_prefix"}

func TestSuggest(t *testing.T) {
	tests := []struct {
		name, key  string
		candidates []string
		want       string
	}{
		{"a letter left out", "algoritm", ruleKeys, "algorithm"},
		{"a letter wrong", "penalti", ruleKeys, "penalty"},
		{"two letters swapped", "prioirty", ruleKeys, "priority"},
		{"a letter too many", "keys", ruleKeys, "key"},
		{"two edits in a long key", "on_redis_falure_", ruleKeys, "on_redis_failure"},
		{"case", "Algorithm", ruleKeys, "algorithm"},
		{"camel case", "onRedisFailure", ruleKeys, "on_redis_failure"},
		{"dashes", "on-redis-failure", ruleKeys, "on_redis_failure"},
		{"the start of a key", "shadow", []string{"key", "value", "shadow_mode", "rate_limit"}, "shadow_mode"},
		{"the start of two keys", "rate", []string{"rate_limit", "rate_unit"}, ""},
		{"too short a start", "sh", []string{"shadow_mode"}, ""},
		{"two edits in a short key", "kxx", []string{"key", "value"}, ""},
		{"nothing near", "colour", ruleKeys, ""},
		{"two as near", "bat", []string{"bar", "bag"}, ""},
		{"two as near, one started", "tier", []string{"tiers", "tied"}, "tiers"},
		{"the nearest of two", "penalt", []string{"penalty", "penalties"}, "penalty"},
		{"a valid key is not suggested", "key", []string{"key"}, ""},
		{"no candidates", "key", nil, ""},
		{"empty key", "", ruleKeys, ""},
		{"a candidate twice", "algoritm", []string{"algorithm", "algorithm"}, "algorithm"},
		{"too long to compare", strings.Repeat("a", 65), []string{strings.Repeat("a", 64)}, ""},
		{"not ASCII", "prïority", ruleKeys, "priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Suggest(tt.key, tt.candidates); got != tt.want {
				t.Errorf("Suggest(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 2, 0},
		{"abc", "abc", 2, 0},
		{"abc", "acb", 2, 1},
		{"abc", "", 2, 3},
		{"kitten", "sitting", 3, 3},
		{"kitten", "sitting", 2, 3}, // over the limit: limit+1
		{"ca", "abc", 3, 3},         // OSA: no edit of a transposed pair
		{"algoritm", "algorithm", 2, 1},
	}
	for _, tt := range tests {
		if got := distance(tt.a, tt.b, tt.limit); got != tt.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.limit, got, tt.want)
		}
		if got := distance(tt.b, tt.a, tt.limit); got != tt.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d", tt.b, tt.a, tt.limit, got, tt.want)
		}
	}
}

func TestUnknownString(t *testing.T) {
	tests := []struct {
		name string
		u    Unknown
		want string
	}{
		{"suggestion", Unknown{Line: 11, Key: "algoritm", Valid: ruleKeys}, `line 11: unknown key "algoritm" (did you mean "algorithm"?)`},
		{"few keys listed", Unknown{Line: 3, Key: "colour", Valid: []string{"from", "to", "tz"}}, `line 3: unknown key "colour" (valid keys: from, to, tz)`},
		{"many keys not listed", Unknown{Line: 3, Key: "colour", Valid: ruleKeys}, `line 3: unknown key "colour"`},
		{"in a mapping", Unknown{Line: 7, In: "lease", Key: "max", Valid: []string{"max_units"}}, `line 7: lease: unknown key "max" (did you mean "max_units"?)`},
		{"hint", Unknown{Line: 4, Key: "algorithm", Valid: []string{"key"}, Hint: "read under rate_limit"}, `line 4: unknown key "algorithm" (read under rate_limit)`},
		{"no line", Unknown{Key: "x"}, `unknown key "x"`},
		{"long key cut", Unknown{Line: 1, Key: strings.Repeat("k", 50)}, `line 1: unknown key "` + strings.Repeat("k", 40) + `..."`},
		{"control characters quoted", Unknown{Line: 1, Key: "a\nb"}, `line 1: unknown key "a\nb"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.u.String(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
