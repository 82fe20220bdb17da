package rlsconfig_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// nested returns a configuration whose descriptors nest depth levels, the
// deepest with a rate limit.
func nested(depth int) string {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	for i := range depth {
		ind := strings.Repeat("    ", i)
		fmt.Fprintf(&b, "%s  - key: k%d\n", ind, i+1)
		if i < depth-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", ind)
		} else {
			fmt.Fprintf(&b, "%s    rate_limit: {unit: second, requests_per_unit: 1}\n", ind)
		}
	}
	return b.String()
}

// Every class of error is reported with the file, the domain and the
// descriptor path, and every problem of a file is reported.
func TestLoadErrors(t *testing.T) {
	const head = "domain: messaging\ndescriptors:\n"
	tests := []struct {
		name   string
		config string
		want   []string // each an error line, exactly
	}{
		{"unknown unit", head + `
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: fortnight, requests_per_unit: 5}
`, []string{`config.yaml: domain messaging: descriptor message_type_marketing.to_number: rate_limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`}},
		{"missing unit", head + "  - key: a\n    rate_limit: {requests_per_unit: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit: missing unit (want second, minute, hour, day, week, month or year)"}},
		{"missing requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit: missing requests_per_unit (0 denies every request)"}},
		{"descriptor without key", head + "  - value: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    descriptors:\n      - {value: y}\n",
			[]string{
				"config.yaml: domain messaging: descriptors[0].key: required (envoyproxy/ratelimit: descriptor has empty key)",
				"config.yaml: domain messaging: descriptor a: descriptors[0].key: required (envoyproxy/ratelimit: descriptor has empty key)",
			}},
		{"duplicate descriptor", head + "  - key: a\n    value: b\n  - key: a\n  - key: a\n    value: b\n",
			[]string{"config.yaml: domain messaging: descriptor a_b: duplicate descriptor composite key (also descriptors[0] of this level)"}},
		{"replaces with an empty name", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}, {}]}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.replaces[1].name: required (the name of the rate limit replaced)"}},
		{"replaces its own name", head + "  - key: a\n    rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n",
			[]string{`config.yaml: domain messaging: descriptor a: rate_limit.replaces[0].name: "x" is this rate limit's own name`}},
		{"share_threshold without a wildcard", head + "  - key: a\n    value: b\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor a_b: share_threshold: needs a wildcard value (with *)"}},
		{"nested too deep", strings.Replace(nested(rules.MaxEntries+1), "deep", "messaging", 1),
			[]string{"config.yaml: domain messaging: descriptor k1.k2.k3.k4.k5.k6.k7.k8: descriptors: nested deeper than 8 levels"}},
		{"concurrency with a unit", head + "  - key: a\n    rate_limit: {algorithm: concurrency, unit: second, requests_per_unit: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit: algorithm concurrency takes limits: [{concurrent: N, hold: D}] (N requests in flight, each hold lapsing D after it was taken), not unit and requests_per_unit"}},
		{"concurrency with a penalty", head + "  - key: a\n    rate_limit: {algorithm: concurrency, limits: [{concurrent: 5}], penalty: 1m}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.penalty: not allowed with algorithm concurrency: a concurrency rule denies while its key is full and admits as soon as a hold ends"}},
		{"concurrency without concurrent", head + "  - key: a\n    rate_limit: {algorithm: concurrency, limits: [{requests: 5, per: 1s}]}\n",
			[]string{
				"config.yaml: domain messaging: descriptor a: rate_limit.limits[0].concurrent: must be between 1 and 1000000 (the requests of a key in flight at once)",
				"config.yaml: domain messaging: descriptor a: rate_limit.limits[0].requests: not allowed with algorithm concurrency (use concurrent and hold)",
				"config.yaml: domain messaging: descriptor a: rate_limit.limits[0].per: not allowed with algorithm concurrency (use concurrent and hold)",
			}},
		{"release of a window rule", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, release: oldest}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.release: only with algorithm concurrency (how the stream-done call releases a hold)"}},
		{"unknown release", head + "  - key: a\n    rate_limit: {algorithm: concurrency, limits: [{concurrent: 5}], release: newest}\n",
			[]string{`config.yaml: domain messaging: descriptor a: rate_limit.release: unknown "newest" (want hold_id or oldest)`}},
		{"reserve with a sliding window", head + "  - key: a\n    rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 1000, reserve: 100}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve: not with algorithm sliding_window: a settle's refund is exact only for fixed_window (into the reservation's own window) and token_bucket (up to the burst); a sliding window would have to rewrite what it recorded"}},
		{"reserve above the quota", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: 1001}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve: 1001 is more than 1000, the smallest quota of the rule's limits (requests, or burst for token_bucket; tiers and schedule entries included): no check would ever be admitted"}},
		{"reserve with debit admitted", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: 100, debit: admitted}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve: not with debit: admitted: the stream-done call's units were used, and what exceeds the reservation is debited whether it fits or not (debit: always, the default of descriptor rules)"}},
		{"reserve with a penalty", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: 100, penalty: 1m}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve: not with penalty: a spent budget refuses the request-time calls until the window frees it, as for rules spent by reports"}},
		{"reserve with a lease", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: 100, lease: true}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve: not with lease: a leased unit is spent in a limiter's memory, apart from the reservation's record"}},
		{"reserve_hold without reserve", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000, reserve_hold: 1m}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.reserve_hold: only with reserve"}},
		{"unlimited with reserve", head + "  - key: ldap\n    rate_limit: {unlimited: true, reserve: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor ldap: rate_limit.unlimited: not allowed with reserve"}},
		{"unlimited with a unit", head + "  - key: ldap\n    rate_limit: {unlimited: true, unit: second, requests_per_unit: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor ldap: rate_limit: should not have unit/requests_per_unit with unlimited"}},
		{"unlimited with the extension", head + "  - key: ldap\n    rate_limit: {unlimited: true, algorithm: sliding_window, penalty: 1m}\n",
			[]string{"config.yaml: domain messaging: descriptor ldap: rate_limit.unlimited: not allowed with algorithm, penalty"}},
		{"unit_multiplier 0", head + "  - key: a\n    rate_limit: {unit: second, unit_multiplier: 0, requests_per_unit: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.unit_multiplier: must be at least 1"}},
		{"window too long", head + "  - key: a\n    rate_limit: {unit: year, unit_multiplier: 4000000000, requests_per_unit: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.unit_multiplier: 4000000000 years is too long a window"}},
		{"unknown key in a descriptor", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    shadow: true\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 5: unknown key "shadow" (did you mean "shadow_mode"?)`}},
		{"unknown key in a nested rate_limit", head + "  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          unit: second\n          requests: 1\n",
			[]string{`config.yaml: domain messaging: descriptor a.b: line 8: rate_limit: unknown key "requests" (did you mean "requests_per_unit"?)`}},
		{"unknown top-level key", "domain: messaging\ndescriptor: []\n",
			[]string{`config.yaml: domain messaging: line 2: unknown key "descriptor" (did you mean "descriptors"?)`}},
		{"misspelt descriptor key", head + "  - key: a\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 4: unknown key "rate_limt" (did you mean "rate_limit"?)`}},
		{"misspelt rate_limit key", head + "  - key: a\n    rate_limit: {unit: minute, unit_multiplyer: 5, requests_per_unit: 1}\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 4: rate_limit: unknown key "unit_multiplyer" (did you mean "unit_multiplier"?)`}},
		{"misspelt extension key", head + "  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algoritm: token_bucket\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 7: rate_limit: unknown key "algoritm" (did you mean "algorithm"?)`}},
		{"misspelt replaces key", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n",
			[]string{
				`config.yaml: domain messaging: descriptor a: line 4: rate_limit.replaces[0]: unknown key "nam" (did you mean "name"?)`,
				"config.yaml: domain messaging: descriptor a: rate_limit.replaces[0].name: required (the name of the rate limit replaced)",
			}},
		{"misspelt key of a limit", head + "  - key: a\n    rate_limit:\n      limits: [{requests: 5, pr: 1s}]\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 5: unknown key "pr" (did you mean "per"?)`}},
		{"misspelt key of a schedule", head + "  - key: a\n    rate_limit:\n      limits: [{requests: 5, per: 1s}]\n      schedule: [{dayly: {from: \"09:00\", to: \"17:00\"}, limits: [{requests: 1, per: 1s}]}]\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 6: unknown key "dayly" (did you mean "daily"?)`}},
		{"a limit of the wrong form", head + "  - key: a\n    rate_limit:\n      limits: [{requests: many, per: 1s}]\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 5: requests: want an integer, got "many"`}},
		{"wrong type", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{"config.yaml: domain messaging: descriptor a: line 4: requests_per_unit: want an integer from 0 to 4294967295, got -1"}},
		{"descriptors not a list", head[:len(head)-1] + " {key: a}\n",
			[]string{"config.yaml: domain messaging: line 2: descriptors: want a list, got a mapping"}},
		{"missing domain", "descriptors: []\n",
			[]string{"config.yaml: domain: required (envoyproxy/ratelimit: a configuration file cannot have an empty domain)"}},
		{"empty file", "# nothing\n", []string{"config.yaml: empty file (a configuration file needs a domain)"}},
		{"two documents", "domain: a\n---\ndomain: b\n", []string{"config.yaml: line 2: a configuration file holds one YAML document"}},
		{"not YAML", "domain: [\n", []string{"config.yaml: yaml: line 1: did not find expected node content"}},
		{"key too long", head + "  - key: " + strings.Repeat("k", 257) + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor " + strings.Repeat("k", 257) + ": key: at most 256 bytes"}},
		// The extension.
		{"burst without token_bucket", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.burst: only with algorithm token_bucket (the bucket's capacity)"}},
		{"token_bucket without burst", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.burst: required with algorithm token_bucket (the bucket's capacity; requests_per_unit tokens refill every unit)"}},
		{"token_bucket of 0", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket, burst: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.requests_per_unit: 0 (deny every request) needs a window algorithm, not token_bucket"}},
		{"limits with unit", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, limits: [{requests: 1, per: 1s}]}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.limits: not allowed with unit, requests_per_unit (limits replaces them)"}},
		{"unknown algorithm (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n",
			[]string{`config.yaml: domain messaging: descriptor a: rate_limit.algorithm: unknown "leaky" (want fixed_window, sliding_window, sliding_window_counter, token_bucket or concurrency)`}},
		{"deny-all with a penalty (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0, penalty: 1m}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.requests_per_unit: 0 (deny every request) is not allowed with schedule, penalty or escalate"}},
		{"a bad limit (rules validation)", head + "  - key: a\n    rate_limit: {limits: [{requests: 5, per: 1s}, {requests: 0, per: 1s}]}\n",
			[]string{
				"config.yaml: domain messaging: descriptor a: rate_limit.limits[1].per: duplicate per 1s (also limits[0])",
				"config.yaml: domain messaging: descriptor a: rate_limit.limits[1].requests: must be between 1 and 2^53",
			}},
		{"a bad schedule (rules validation)", head + "  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      schedule: [{daily: {from: \"25:00\", to: \"06:00\"}, limits: [{requests: 1, per: 1s}]}]\n",
			[]string{`config.yaml: domain messaging: descriptor a: rate_limit.schedule[0].daily.from: "25:00" must be HH:MM (00:00 to 23:59)`}},
		{"a long name (rules validation)", head + "  - key: a\n    rate_limit: {name: " + strings.Repeat("n", 129) + ", unit: second, requests_per_unit: 1}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.name: at most 128 bytes"}},
		{"ipv6_prefix out of range (rules validation)", head + "  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1, ipv6_prefix: 16}\n",
			[]string{"config.yaml: domain messaging: descriptor remote_address: rate_limit.ipv6_prefix: must be between 32 and 128 (a shorter prefix would group unrelated networks; 128: no grouping)"}},
		{"ipv6_prefix with unlimited", head + "  - key: remote_address\n    rate_limit: {unlimited: true, ipv6_prefix: 48}\n",
			[]string{"config.yaml: domain messaging: descriptor remote_address: rate_limit.unlimited: not allowed with ipv6_prefix"}},
		{"lease with the sliding window log (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_window, lease: true}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.lease: not with algorithm sliding_window: the sliding window log records the time of each request; " +
				"a leased unit is spent at another time than it was debited, so the log would no longer be exact per request — use sliding_window_counter"}},
		{"lease with a penalty (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, penalty: 1m, lease: {max_units: 2}}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.lease: not with penalty: a penalty must stop every instance at once, while other instances keep serving the units they hold"}},
		{"lease over requests_per_unit (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, lease: {max_units: 11}}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.lease.max_units: 11 is more than 10, the smallest quota of the rule's limits (requests, or burst for token_bucket; tiers and schedule entries included)"}},
		{"lease over a burst (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 20, lease: {max_units: 21}}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.lease.max_units: 21 is more than 20, the smallest quota of the rule's limits (requests, or burst for token_bucket; tiers and schedule entries included)"}},
		{"lease of 0 requests (rules validation)", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0, lease: true}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.lease: not with 0 requests: such a rate limit denies without Redis, there is no budget to lease"}},
		{"lease with unlimited", head + "  - key: a\n    rate_limit: {unlimited: true, lease: true}\n",
			[]string{"config.yaml: domain messaging: descriptor a: rate_limit.unlimited: not allowed with lease"}},
		{"lease of another form", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, lease: 5}\n",
			[]string{"config.yaml: domain messaging: descriptor a: line 4: lease must be true, false or a mapping such as {max_units: 500}"}},
		{"lease with an unknown key", head + "  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      lease: {max: 5}\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 7: lease: unknown key "max" (did you mean "max_units"?)`}},
		{"a bad duration", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: 1x}\n",
			[]string{`config.yaml: domain messaging: descriptor a: line 4: penalty: invalid duration "1x" (want Go syntax such as 500ms, 10s, 5m, 1h)`}},
		{"every problem of a file", head + `
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    descriptors:
      - key: c
        value: d
        share_threshold: true
      - key: e
        rate_limit: {unit: second}
`, []string{
			`config.yaml: domain messaging: descriptor a: rate_limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
			"config.yaml: domain messaging: descriptor b.c_d: share_threshold: needs a wildcard value (with *)",
			"config.yaml: domain messaging: descriptor b.e: rate_limit: missing requests_per_unit (0 denies every request)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := rlsconfig.Load([]rlsconfig.File{{Name: "config.yaml", Data: []byte(tt.config)}})
			if err == nil {
				t.Fatalf("loaded %+v; want an error", c.Rules)
			}
			got := strings.Split(err.Error(), "\n")
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tt.want, "\n"))
			}
			if n := len(rlsconfig.Errors(err)); n != len(tt.want) {
				t.Errorf("Errors: %d, want %d", n, len(tt.want))
			}
		})
	}
}

// A domain is unique across the files; the problems of every file are
// reported.
func TestLoadErrorsAcrossFiles(t *testing.T) {
	files := []rlsconfig.File{
		{Name: "a.yaml", Data: []byte("domain: messaging\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n")},
		{Name: "b.yaml", Data: []byte("domain: other\ndescriptors: [{key: a, rate_limit: {unit: hours, requests_per_unit: 1}}]\n")},
		{Name: "c.yaml", Data: []byte("domain: messaging\ndescriptors: []\n")},
	}
	_, err := rlsconfig.Load(files)
	want := []string{
		`b.yaml: domain other: descriptor a: rate_limit: unknown unit "hours" (want second, minute, hour, day, week, month or year)`,
		"c.yaml: domain messaging: duplicate domain (also in a.yaml)",
	}
	if err == nil || !slices.Equal(strings.Split(err.Error(), "\n"), want) {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	var e *rlsconfig.Error
	if !errors.As(err, &e) || e.File != "b.yaml" || e.Domain != "other" || e.Path != "a" || e.Field != "rate_limit" {
		t.Errorf("first error %+v", e)
	}
}

// A domain without descriptors, or with descriptors but no rate limit, is
// a domain without rules; MaxEntries levels are allowed.
func TestLoadEdges(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{
		{Name: "a.yaml", Data: []byte("domain: empty\n")},
		{Name: "b.yaml", Data: []byte("domain: placeholders\ndescriptors: [{key: a, descriptors: [{key: b}]}, {key: c, value: d}]\n")},
		{Name: "c.yaml", Data: []byte(nested(rules.MaxEntries))},
		{Name: "d.yaml", Data: []byte("---\ndomain: doc\ndescriptors:\n  - {key: k, value: true, rate_limit: {unit: second, requests_per_unit: 4294967295}}\n")},
		{Name: "e.yaml", Data: []byte("domain: v6\ndescriptors:\n  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 5, ipv6_prefix: 56}}\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []rlsconfig.Domain{{Name: "empty", File: "a.yaml"}, {Name: "placeholders", File: "b.yaml"},
		{Name: "deep", File: "c.yaml", Rules: 1}, {Name: "doc", File: "d.yaml", Rules: 1}, {Name: "v6", File: "e.yaml", Rules: 1}}
	if !slices.Equal(c.Domains, want) {
		t.Errorf("domains %+v, want %+v", c.Domains, want)
	}
	if len(c.Rules) != 3 || len(c.Rules[0].Descriptor.Entries) != rules.MaxEntries ||
		c.Rules[1].ID != "rls.doc.k_true" || c.Rules[1].Limits[0].Requests != 1<<32-1 || c.Rules[2].IPv6Prefix != 56 {
		t.Errorf("rules %+v", c.Rules)
	}
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Rule ids are readable when they can be, else cut short with a hash of
// the path; they never depend on the order or names of the files.
func TestRuleIDs(t *testing.T) {
	long := strings.Repeat("v", 80)
	config := func(domain string) []byte {
		return []byte(`domain: ` + domain + `
descriptors:
  - {key: a_b, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: a, value: b, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: "clé", value: "x*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: long, value: ` + long + `, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: path, descriptors: [{key: user, value: "a b", rate_limit: {unit: second, requests_per_unit: 1}}]}
`)
	}
	files := []rlsconfig.File{{Name: "one.yaml", Data: config("one")}, {Name: "two.yaml", Data: config("two.domain")}}
	c, err := rlsconfig.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range c.Rules {
		if !validID.MatchString(r.ID) {
			t.Errorf("invalid id %q", r.ID)
		}
		ids = append(ids, r.ID)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^rls\.one\.a_b-[0-9a-f]{12}$`), // a_b collides with a_b (key a, value b)
		regexp.MustCompile(`^rls\.one\.a_b-[0-9a-f]{12}$`),
		regexp.MustCompile(`^rls\.one\.cl__x_$`),
		regexp.MustCompile(`^rls\.one\.long_v{38}-[0-9a-f]{12}$`), // cut to 51 bytes
		regexp.MustCompile(`^rls\.one\.path\.user_a_b$`),
		regexp.MustCompile(`^rls\.two\.domain\.a_b-[0-9a-f]{12}$`),
		regexp.MustCompile(`^rls\.two\.domain\.a_b-[0-9a-f]{12}$`),
		regexp.MustCompile(`^rls\.two\.domain\.cl__x_$`),
		regexp.MustCompile(`^rls\.two\.domain\.long_v{31}-[0-9a-f]{12}$`),
		regexp.MustCompile(`^rls\.two\.domain\.path\.user_a_b$`),
	}
	if len(ids) != len(want) {
		t.Fatalf("ids %q", ids)
	}
	for i, re := range want {
		if !re.MatchString(ids[i]) {
			t.Errorf("id %q does not match %s", ids[i], re)
		}
	}
	if ids[0] == ids[1] || ids[5] == ids[6] {
		t.Errorf("colliding paths share an id: %q", ids)
	}

	// Other file names and order: the same ids.
	again, err := rlsconfig.Load([]rlsconfig.File{{Name: "0.yaml", Data: config("two.domain")}, {Name: "9.yaml", Data: config("one")}})
	if err != nil {
		t.Fatal(err)
	}
	var ids2 []string
	for _, r := range again.Rules {
		ids2 = append(ids2, r.ID)
	}
	slices.Sort(ids)
	slices.Sort(ids2)
	if !slices.Equal(ids, ids2) {
		t.Errorf("ids depend on the files' names or order:\n%q\n%q", ids, ids2)
	}
}

// ReadDir reads the *.yaml and *.yml files of the directory itself, sorted,
// following links, and ignores dotfiles, other files and subdirectories;
// its bounds are enforced.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yml", "domain: b\n")
	write("a.yaml", "domain: a\n")
	write(".hidden.yaml", "not: loaded\n")
	write("README.md", "not loaded")
	write("c.yaml.swp", "not loaded")
	if err := os.MkdirAll(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub.yaml", "d.yaml"), []byte("domain: d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap volume: the files are links into a hidden directory.
	if err := os.MkdirAll(filepath.Join(dir, "..data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..data", "c.yaml"), []byte("domain: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "c.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	files, err := rlsconfig.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name+"="+strings.TrimSpace(string(f.Data)))
	}
	if want := []string{"a.yaml=domain: a", "b.yml=domain: b", "c.yaml=domain: c"}; !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	c, err := rlsconfig.LoadDir(dir)
	if err != nil || !slices.Equal(c.Files, []string{"a.yaml", "b.yml", "c.yaml"}) || c.Hash != rlsconfig.Hash(files) {
		t.Errorf("LoadDir: %+v, %v", c, err)
	}

	if _, err := rlsconfig.ReadDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory reads")
	}
	write("big.yaml", strings.Repeat("#", rlsconfig.MaxFileSize+1))
	if _, err := rlsconfig.ReadDir(dir); err == nil || !strings.Contains(err.Error(), "big.yaml: larger than 4194304 bytes") {
		t.Errorf("a file over the bound: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "big.yaml")); err != nil {
		t.Fatal(err)
	}

	many := t.TempDir()
	for i := range rlsconfig.MaxFiles + 1 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("%04d.yaml", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rlsconfig.ReadDir(many); err == nil || !strings.Contains(err.Error(), "more than 1000 configuration files") {
		t.Errorf("too many files: %v", err)
	}

	// Files within the bound one by one, over it together.
	large := t.TempDir()
	for i := range rlsconfig.MaxTotalSize/rlsconfig.MaxFileSize + 1 {
		if err := os.WriteFile(filepath.Join(large, fmt.Sprintf("%d.yaml", i)), []byte(strings.Repeat("#", rlsconfig.MaxFileSize)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rlsconfig.ReadDir(large); err == nil || !strings.Contains(err.Error(), "larger than 16777216 bytes (16 MiB) together") {
		t.Errorf("files over the bound together: %v", err)
	}
}

// The hash changes with any name or content, and only then.
func TestHash(t *testing.T) {
	base := []rlsconfig.File{{Name: "a.yaml", Data: []byte("domain: a\n")}, {Name: "b.yaml", Data: []byte("domain: b\n")}}
	h := rlsconfig.Hash(base)
	if h != rlsconfig.Hash(slices.Clone(base)) {
		t.Error("the hash is not deterministic")
	}
	for name, files := range map[string][]rlsconfig.File{
		"content":   {{Name: "a.yaml", Data: []byte("domain: a\n")}, {Name: "b.yaml", Data: []byte("domain: c\n")}},
		"name":      {{Name: "a.yaml", Data: []byte("domain: a\n")}, {Name: "c.yaml", Data: []byte("domain: b\n")}},
		"boundary":  {{Name: "a.yaml", Data: []byte("domain: a\nb.yaml")}, {Name: "", Data: []byte("domain: b\n")}},
		"one fewer": base[:1],
		"none":      nil,
	} {
		if rlsconfig.Hash(files) == h {
			t.Errorf("%s: same hash", name)
		}
	}
}

// Arbitrary bytes as one file never panic, and either fail or give rules
// that validate and compile.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata", examplesDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				f.Add(readFile(f, filepath.Join(dir, e.Name())))
			}
		}
	}
	f.Add([]byte(nested(rules.MaxEntries + 1)))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, value: \"*\", share_threshold: true, rate_limit: {unlimited: true}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := rlsconfig.Load([]rlsconfig.File{{Name: "fuzz.yaml", Data: data}})
		if err != nil {
			if len(rlsconfig.Errors(err)) == 0 && !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("an error that names no file: %v", err)
			}
			return
		}
		for _, r := range c.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("rule %s does not validate: %v", r.ID, err)
			}
		}
		if _, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{}); err != nil {
			t.Fatalf("rules do not compile: %v", err)
		}
	})
}

// A file envoyproxy/ratelimit loads loads here with its meaning: a key of
// its list out of place is ignored, with a warning naming the file, line,
// descriptor and key (unlimited beside key leaves the descriptor without a
// rate limit: no rule), and quota_mode and metadata are read, not applied.
// What it refuses stays refused: an unknown key, inside an ignored value
// too, and the extension's keys outside rate_limit.
func TestLoadKeysOutOfPlace(t *testing.T) {
	const file = `domain: edge
name: ignored-at-the-top
descriptors:
  - key: ldap
    unlimited: true
  - key: api
    quota_mode: true
    metadata: {team: payments}
    rate_limit:
      unit: minute
      requests_per_unit: 10
      shadow_mode: true
      replaces: [{name: x, key: y}]
`
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "erl.yaml", Data: []byte(file)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 1 || c.Rules[0].Descriptor.Entries[0].Key != "api" || c.Rules[0].Shadow {
		t.Fatalf("rules %+v: want only api's, not in shadow mode", c.Rules)
	}
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.String())
	}
	want := []string{
		"erl.yaml: line 2: domain edge: name: ignored here, as envoyproxy/ratelimit ignores it (read under rate_limit)",
		"erl.yaml: line 5: domain edge: descriptor ldap: unlimited: ignored here, as envoyproxy/ratelimit ignores it (read under rate_limit; this descriptor is not made unlimited by it)",
		"erl.yaml: line 7: domain edge: descriptor api: quota_mode: not applied: answered as without it",
		"erl.yaml: line 8: domain edge: descriptor api: metadata: not used: no response dynamic metadata is sent",
		"erl.yaml: line 12: domain edge: descriptor api: rate_limit.shadow_mode: ignored here, as envoyproxy/ratelimit ignores it (read in a descriptor; this rate limit is not in shadow mode)",
		"erl.yaml: line 13: domain edge: descriptor api: rate_limit.replaces[0].key: ignored here, as envoyproxy/ratelimit ignores it (not read here)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for name, tt := range map[string]struct{ config, want string }{
		"unknown key inside an ignored value": {"domain: edge\ndescriptors:\n  - key: a\n    replaces: [{name: x, colour: red}]\n",
			`erl.yaml: domain edge: descriptor a: line 4: unknown key "colour"`},
		"the extension outside rate_limit": {"domain: edge\ndescriptors:\n  - key: a\n    algorithm: token_bucket\n",
			`erl.yaml: domain edge: descriptor a: line 4: unknown key "algorithm" (read under rate_limit)`},
		"quota_mode not a boolean": {"domain: edge\ndescriptors:\n  - key: a\n    quota_mode: often\n",
			"erl.yaml: domain edge: descriptor a: quota_mode: line 4: want true or false"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rlsconfig.Load([]rlsconfig.File{{Name: "erl.yaml", Data: []byte(tt.config)}})
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %s", err, tt.want)
			}
		})
	}
}

// An error shows a descriptor's path quoted when it holds a character that
// is not printable, and at most 512 bytes of it: the keys and values of a
// file reach terminals (rules check) and logs, and a file of descriptors
// nested deep under long keys made the path of a decoding error as long
// as the file, built again at every level.
func TestLoadErrorsShowPathsSafely(t *testing.T) {
	_, err := rlsconfig.Load([]rlsconfig.File{{Name: "f.yaml", Data: []byte(
		"domain: d\ndescriptors:\n  - key: \"k\\e[31m\"\n    value: \"v\\e]0;x\\a\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}})
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\a") || !strings.Contains(err.Error(), `descriptor "k\x1b[31m_v\x1b]0;x\a"`) {
		t.Errorf("error %q: want the path quoted", err)
	}

	long := strings.Repeat("K", 1000)
	doc := "domain: d\ndescriptors: " + strings.Repeat("[{key: "+long+", descriptors: ", 100) +
		"[{key: a, rate_limit: {unit: second, requests_per_unit: x}}]" + strings.Repeat("}]", 100) + "\n"
	_, err = rlsconfig.Load([]rlsconfig.File{{Name: "f.yaml", Data: []byte(doc)}})
	if err == nil || !strings.Contains(err.Error(), "requests_per_unit") || len(err.Error()) > 1024 {
		t.Errorf("error of %d bytes: %.200q", len(fmt.Sprint(err)), err)
	}
}
