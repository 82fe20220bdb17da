package rlsconfig_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// examplesDir holds the examples of envoyproxy/ratelimit's README (one
// file each, named by their number), a share_threshold example and the
// longer units.
const examplesDir = "testdata/examples"

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// loadSet loads dir and compiles its rules as the limiter does.
func loadSet(t *testing.T, dir string) (*rlsconfig.Config, *rules.Set) {
	t.Helper()
	c, err := rlsconfig.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, set
}

// describe renders a rule for comparison: id, limits, flags.
func describe(r *rules.Rule) string {
	var limits []string
	for _, l := range r.Limits {
		if r.Algorithm == decide.TokenBucket {
			limits = append(limits, fmt.Sprintf("%d/%s burst %d", l.Rate, l.Per, l.Burst))
		} else {
			limits = append(limits, fmt.Sprintf("%d/%s", l.Requests, l.Per))
		}
	}
	s := r.ID + " " + string(r.Algorithm) + " [" + strings.Join(limits, ", ") + "]"
	d := r.Descriptor
	for _, f := range []struct {
		on   bool
		name string
	}{{d.Unlimited, "unlimited"}, {r.Shadow, "shadow"}, {r.Blocks(), "blocks"}, {d.Name != "", "name=" + d.Name},
		{len(d.Replaces) > 0, "replaces=" + strings.Join(d.Replaces, ",")}} {
		if f.on {
			s += " " + f.name
		}
	}
	return s
}

// Every example loads, into the rules the README describes.
func TestExamplesLoad(t *testing.T) {
	c, set := loadSet(t, examplesDir)
	want := []string{
		"rls.mongo_cps.database_users fixed_window [500/1s]",
		"rls.mongo_cps.database_default fixed_window [500/1s]",
		"rls.messaging.message_type_marketing.to_number fixed_window [5/24h]",
		"rls.messaging.to_number fixed_window [100/24h]",
		"rls.edge_proxy_per_ip.remote_address fixed_window [10/1s]",
		"rls.edge_proxy_per_ip.remote_address_50.0.0.5 fixed_window [0/1s] blocks",
		"rls.example4.key_value.subkey fixed_window [300/1s]",
		"rls.example4_flat.key_value fixed_window [300/1s]",
		"rls.internal.ldap fixed_window [] unlimited",
		"rls.internal.azure fixed_window [100/1m]",
		"rls.example6.service.user_user-a fixed_window [10/1s] shadow",
		"rls.example6.service.user_user-b fixed_window [20/1s]",
		"rls.example7.key_1_value_1.user_bkthomps fixed_window [5/1s] name=specific_limit",
		"rls.example7.key_2_value_2.user_bkthomps fixed_window [10/1s] replaces=specific_limit",
		"rls.example8.key1 fixed_window [10/1m]",
		"rls.example8.key1_value1 fixed_window [20/1m]",
		"rls.example9.key1_value_ fixed_window [20/1m]",
		"rls.shared.path__api__ fixed_window [100/1m]",
		"rls.shared.path__files__ fixed_window [100/1m]",
		"rls.units.weekly fixed_window [7/168h]",
		"rls.units.monthly fixed_window [30/720h]",
		"rls.units.yearly fixed_window [365/8760h]",
		"rls.units.every_5_minutes fixed_window [50/5m]",
	}
	var got []string
	for _, r := range c.Rules {
		got = append(got, describe(set.Rule(r.ID)))
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.ID, err)
		}
		if r.Priority != rlsconfig.Priority {
			t.Errorf("%s: priority %d", r.ID, r.Priority)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var domains []string
	for _, d := range c.Domains {
		domains = append(domains, fmt.Sprintf("%s %s %d", d.Name, d.File, d.Rules))
	}
	wantDomains := []string{"mongo_cps 1-mongo_cps.yaml 2", "messaging 2-messaging.yaml 2",
		"edge_proxy_per_ip 3-edge_proxy_per_ip.yaml 2", "example4 4-example4.yaml 1", "example4_flat 4-example4_flat.yaml 1",
		"internal 5-internal.yaml 2", "example6 6-example6.yaml 2", "example7 7-example7.yaml 2", "example8 8-example8.yaml 2",
		"example9 9-example9.yaml 1", "shared share_threshold.yaml 2", "units units.yaml 4"}
	if !slices.Equal(domains, wantDomains) {
		t.Errorf("domains %q, want %q", domains, wantDomains)
	}
	if len(c.Files) != len(wantDomains) || len(c.Hash) != 64 {
		t.Errorf("files %q, hash %q", c.Files, c.Hash)
	}
	// The levels keep their flags.
	if d := set.Rule("rls.example8.key1").Descriptor; !d.Entries[0].DetailedMetric {
		t.Errorf("example8: detailed_metric lost: %+v", d)
	}
	if d := set.Rule("rls.shared.path__api__").Descriptor; !d.Entries[0].ShareThreshold {
		t.Errorf("share_threshold lost: %+v", d)
	}
}

// desc is a request descriptor written "key=value,key2=value2".
func desc(s string) rules.Descriptor {
	var d rules.Descriptor
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, rules.Entry{Key: k, Value: v})
	}
	d.Cost = 1
	return d
}

// The examples match as the README says.
func TestExamplesMatch(t *testing.T) {
	_, set := loadSet(t, examplesDir)
	tests := []struct {
		name   string
		domain string
		descs  []string
		// want is the rule applied to each descriptor, by index:
		// "index:rule id"; descriptors left out match nothing.
		want []string
	}{
		{"example 1: a listed value", "mongo_cps", []string{"database=users"}, []string{"0:rls.mongo_cps.database_users"}},
		{"example 1: another value matches nothing", "mongo_cps", []string{"database=orders"}, nil},
		{"example 2: nested and key-only limits, one request", "messaging",
			[]string{"message_type=marketing,to_number=2061111111", "to_number=2061111111"},
			[]string{"0:rls.messaging.message_type_marketing.to_number", "1:rls.messaging.to_number"}},
		{"example 2: the placeholder alone has no limit", "messaging", []string{"message_type=marketing"}, nil},
		{"example 2: another message type", "messaging", []string{"message_type=transactional,to_number=2061111111"}, nil},
		{"example 3: any address gets the key's limit", "edge_proxy_per_ip", []string{"remote_address=50.0.0.1"},
			[]string{"0:rls.edge_proxy_per_ip.remote_address"}},
		{"example 3: key and value before key", "edge_proxy_per_ip", []string{"remote_address=50.0.0.5"},
			[]string{"0:rls.edge_proxy_per_ip.remote_address_50.0.0.5"}},
		{"example 4: two entries do not match a one-level limit", "example4_flat", []string{"key=value,subkey=subvalue"}, nil},
		{"example 4: the one-level limit matches one entry", "example4_flat", []string{"key=value"}, []string{"0:rls.example4_flat.key_value"}},
		{"example 4: two entries match two levels", "example4", []string{"key=value,subkey=subvalue"}, []string{"0:rls.example4.key_value.subkey"}},
		{"example 4: one entry does not match two levels", "example4", []string{"key=value"}, nil},
		{"example 5: unlimited", "internal", []string{"ldap=x", "azure=y"}, []string{"0:rls.internal.ldap", "1:rls.internal.azure"}},
		{"example 6: shadow", "example6", []string{"service=auth-service,user=user-a", "service=auth-service,user=user-b", "service=auth-service,user=user-c"},
			[]string{"0:rls.example6.service.user_user-a", "1:rls.example6.service.user_user-b"}},
		{"example 7: the replacing limit alone", "example7", []string{"key_1=value_1,user=bkthomps", "key_2=value_2,user=bkthomps"},
			[]string{"1:rls.example7.key_2_value_2.user_bkthomps"}},
		{"example 7: the replaced limit on its own", "example7", []string{"key_1=value_1,user=bkthomps"},
			[]string{"0:rls.example7.key_1_value_1.user_bkthomps"}},
		{"example 8: an unlisted value", "example8", []string{"key1=unspecified_value"}, []string{"0:rls.example8.key1"}},
		{"example 8: a listed value", "example8", []string{"key1=value1"}, []string{"0:rls.example8.key1_value1"}},
		{"example 9: wildcard", "example9", []string{"key1=value_1", "key1=value_2", "key1=other"},
			[]string{"0:rls.example9.key1_value_", "1:rls.example9.key1_value_"}},
		{"unknown domain", "nope", []string{"database=users"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &rules.DescriptorRequest{Domain: tt.domain}
			for _, d := range tt.descs {
				req.Descriptors = append(req.Descriptors, desc(d))
			}
			var got []string
			for _, a := range set.MatchDescriptors(req, now, nil) {
				got = append(got, fmt.Sprintf("%d:%s", a.Descriptor, a.Rule.ID))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("applied %q, want %q", got, tt.want)
			}
		})
	}
}

// The flags of the examples reach the calls: an unlimited rule's call has
// no limit, a shadow rule stays shadow, a blocking rule needs no count.
func TestExamplesFlags(t *testing.T) {
	_, set := loadSet(t, examplesDir)
	match := func(domain, d string) rules.Applied {
		t.Helper()
		as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: domain, Descriptors: []rules.Descriptor{desc(d)}}, now, nil)
		if len(as) != 1 {
			t.Fatalf("%s %s: %d rules applied", domain, d, len(as))
		}
		return as[0]
	}
	if a := match("internal", "ldap=x"); !a.Rule.Descriptor.Unlimited || len(a.Call.Limits) != 0 {
		t.Errorf("example 5: ldap applied %+v; want an unlimited rule without limits", a)
	}
	if a := match("example6", "service=s,user=user-a"); !a.Rule.Shadow {
		t.Error("example 6: user-a not in shadow mode")
	}
	if a := match("edge_proxy_per_ip", "remote_address=50.0.0.5"); !a.Rule.Blocks() {
		t.Error("example 3: 50.0.0.5 does not block")
	}
	if a := match("units", "every_5_minutes=x"); a.Call.Limits[0] != (decide.Limit{Requests: 50, Per: 5 * time.Minute}) {
		t.Errorf("unit_multiplier: %+v", a.Call.Limits)
	}
}

// With share_threshold every value matching the wildcard counts under one
// key; without it each value counts on its own.
func TestShareThreshold(t *testing.T) {
	_, set := loadSet(t, examplesDir)
	keys := func(d string) decide.Keys {
		as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: "shared", Descriptors: []rules.Descriptor{desc(d)}}, now, nil)
		if len(as) != 1 {
			t.Fatalf("%s: %d rules applied", d, len(as))
		}
		return as[0].Call.Keys
	}
	if a, b := keys("path=/api/users"), keys("path=/api/orders"); a != b {
		t.Errorf("share_threshold: two values have different keys:\n%+v\n%+v", a, b)
	}
	if a, b := keys("path=/files/a"), keys("path=/files/b"); a == b {
		t.Errorf("without share_threshold two values share keys %+v", a)
	}
}

// The extension fields become the rule's algorithm, limits, penalty,
// failure policy, schedule and escalations.
func TestExtension(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "extension.yaml", Data: readFile(t, "testdata/extension.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]rules.Rule{}
	for _, r := range c.Rules {
		byID[r.ID] = r
	}
	key := byID["rls.api.api_key"]
	if key.Algorithm != decide.TokenBucket || !slices.Equal(key.Limits, []rules.Limit{{Rate: 10, Burst: 50, Per: rules.Duration(time.Second)}}) ||
		key.OnRedisFailure != rules.FailDeny {
		t.Errorf("token bucket: %+v", key)
	}
	login := byID["rls.api.login"]
	if login.Algorithm != decide.SlidingWindow || len(login.Limits) != 2 || login.Limits[1].Requests != 100 ||
		login.Penalty != rules.Duration(5*time.Minute) || len(login.Escalate) != 1 || login.Escalate[0].Triggers != 3 ||
		login.OnRedisFailure != rules.FailLocal {
		t.Errorf("limits, penalty, escalate: %+v", login)
	}
	search := byID["rls.api.search"]
	if len(search.Schedule) != 1 || search.Schedule[0].Daily == nil || search.Schedule[0].Limits[0].Requests != 60 {
		t.Errorf("schedule: %+v", search)
	}
	if len(c.Rules) != 3 {
		t.Errorf("%d rules, want 3", len(c.Rules))
	}
}

// The extension's lease, in both forms, becomes the rule's; lease: false
// is none. Every call of a leased rule is leased, and it debits denied
// calls as every descriptor rule does.
func TestExtensionLease(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "lease.yaml", Data: []byte(`domain: hot
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 6400, lease: true}
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 10
      algorithm: token_bucket
      burst: 1000
      lease:
        max_units: 50
  - key: user
    rate_limit: {algorithm: sliding_window_counter, limits: [{requests: 640, per: 1s}, {requests: 64000, per: 1h}], lease: true}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10, lease: false}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		desc  string
		lease *rules.Lease
		max   int64
	}{
		{"api_key=k", &rules.Lease{}, 100},
		{"tenant=t", &rules.Lease{MaxUnits: 50}, 50},
		{"user=u", &rules.Lease{}, 10},
		{"ip=192.0.2.1", nil, 0},
	} {
		as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: "hot", Descriptors: []rules.Descriptor{desc(tt.desc)}}, now, nil)
		if len(as) != 1 {
			t.Fatalf("%s: %d rules applied", tt.desc, len(as))
		}
		a := as[0]
		if !reflect.DeepEqual(a.Rule.Lease, tt.lease) || a.Call.Leased != (tt.lease != nil) || !a.Call.DebitDenied {
			t.Errorf("%s: lease %+v, call leased %v, debits denied %v; want lease %+v", tt.desc, a.Rule.Lease, a.Call.Leased, a.Call.DebitDenied, tt.lease)
		}
		if got := a.Rule.LeaseMax(a.Call.Limits); got != tt.max {
			t.Errorf("%s: LeaseMax = %d, want %d", tt.desc, got, tt.max)
		}
	}
}

// The extension's algorithm concurrency, with its limit in the rules-file
// form and its release, makes a concurrency descriptor rule: the
// request-time descriptor takes a hold, the same with a hold entry
// appended releases one.
func TestExtensionConcurrency(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "holds.yaml", Data: []byte(`domain: edge
descriptors:
  - key: api_key
    rate_limit: {algorithm: concurrency, limits: [{concurrent: 3, hold: 5m}]}
  - key: upload
    rate_limit: {algorithm: concurrency, limits: [{concurrent: 2}], release: oldest}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := &rules.DescriptorRequest{Domain: "edge", Descriptors: []rules.Descriptor{
		desc("api_key=k"), desc("api_key=k,hold=-"), desc("upload=u,hold=-"),
	}}
	as := set.MatchDescriptors(req, now, nil)
	if len(as) != 3 {
		t.Fatalf("%d rules applied, want 3", len(as))
	}
	take, byID, oldest := as[0], as[1], as[2]
	if take.Rule.ID != "rls.edge.api_key" || take.Call.Algorithm != decide.Concurrency || take.Call.Cost != 1 ||
		!slices.Equal(take.Call.Limits, []decide.Limit{{Requests: 3, Per: 5 * time.Minute}}) {
		t.Errorf("take: %+v", take)
	}
	if !byID.Call.Release || !byID.NoRelease || byID.Call.Keys != take.Call.Keys {
		t.Errorf("release naming no id, by id only: %+v", byID)
	}
	if !oldest.Call.Release || oldest.NoRelease || oldest.Call.HoldID != "" || oldest.Rule.Descriptor.Release != rules.ReleaseOldest {
		t.Errorf("release naming no id, the oldest: %+v", oldest)
	}
}

// The extension's reserve makes a descriptor rule whose request-time
// descriptor (hits_addend 0) takes the estimate, whose stream-done one
// (a hold entry appended) settles it with its hits_addend, and whose
// descriptor without a hold entry and hits_addend above 0 is a debit.
func TestExtensionReserve(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "llm.yaml", Data: []byte(`domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 100000, reserve: 4096, reserve_hold: 5m}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := decide.NewHoldID()
	check, debit, settle := desc("api_key=k"), desc("api_key=k"), desc("api_key=k,hold="+id)
	check.Cost, debit.Cost, settle.Cost = 0, 700, 700
	as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: "llm", Descriptors: []rules.Descriptor{check, debit, settle}}, now, nil)
	if len(as) != 3 {
		t.Fatalf("%d rules applied, want 3", len(as))
	}
	take, plain, end := as[0], as[1], as[2]
	if take.Rule.ID != "rls.llm.api_key" || take.Call.Cost != 4096 || take.Call.Reserve != 5*time.Minute || take.Call.DebitDenied || take.Debit {
		t.Errorf("request-time descriptor: %+v, want a take of 4096", take)
	}
	if !plain.Debit || plain.Call.Cost != 700 || !plain.Call.DebitDenied || plain.Call.Settle || plain.Call.Reserve != 5*time.Minute {
		t.Errorf("descriptor without hold: %+v, want a debit of 700", plain)
	}
	if !end.Call.Settle || end.Call.HoldID != id || end.Call.Cost != 700 || end.Call.Keys != take.Call.Keys || end.NoRelease {
		t.Errorf("stream-done descriptor: %+v, want the settle of %s at 700 on the take's key", end, id)
	}
}

// A whitelisted descriptor (no rate_limit, nothing nested) beside a less
// specific one keeps its requests unlimited instead of leaving them to the
// less specific one; alone it makes no rule.
func TestWhitelisted(t *testing.T) {
	const config = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 10.0.0.1          # whitelisted
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /api/health*      # whitelisted, inside the wildcard
  - key: path
    value: /api/users        # whitelisted, matching the wildcard
    descriptors:
      - key: method          # whitelisted too: no rate limit below
  - key: user
    value: alice             # nothing less specific: no rule
`
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "edge.yaml", Data: []byte(config)}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range c.Rules {
		ids = append(ids, describe(&r))
	}
	want := []string{
		"rls.edge.remote_address fixed_window [10/1s]",
		"rls.edge.remote_address_10.0.0.1 fixed_window [] unlimited",
		"rls.edge.path__api__ fixed_window [10/1s]",
		"rls.edge.path__api_health_ fixed_window [] unlimited",
		"rls.edge.path__api_users fixed_window [] unlimited",
	}
	if !slices.Equal(ids, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}
	for d, wantRule := range map[string]string{
		"remote_address=10.0.0.1":    "rls.edge.remote_address_10.0.0.1",
		"remote_address=10.0.0.2":    "rls.edge.remote_address",
		"path=/api/healthz":          "rls.edge.path__api_health_",
		"path=/api/users":            "rls.edge.path__api_users",
		"path=/api/users,method=GET": "",
		"path=/api/orders":           "rls.edge.path__api__",
		"user=alice":                 "",
	} {
		as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: "edge", Descriptors: []rules.Descriptor{desc(d)}}, now, nil)
		got := ""
		if len(as) > 0 {
			got = as[0].Rule.ID
		}
		if got != wantRule {
			t.Errorf("%s: applied %q, want %q", d, got, wantRule)
		}
	}
}

// A '*' anywhere in a value matches any run of characters, the empty one
// too, as envoyproxy/ratelimit matches it: trailing, in the middle, several
// times; the most specific wildcard wins, and share_threshold works with
// any of them.
func TestWildcardsAnywhere(t *testing.T) {
	c, err := rlsconfig.Load([]rlsconfig.File{{Name: "wild.yaml", Data: []byte(`domain: wild
descriptors:
  - {key: path, value: "/api/*/action", rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: path, value: "a*b*c", rate_limit: {unit: second, requests_per_unit: 6}}
  - {key: path, value: "/files/*", rate_limit: {unit: second, requests_per_unit: 7}}
  - {key: path, value: "/files/*.png", share_threshold: true, rate_limit: {unit: second, requests_per_unit: 8}}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	match := func(path string) (int64, decide.Keys) {
		as := set.MatchDescriptors(&rules.DescriptorRequest{Domain: "wild", Descriptors: []rules.Descriptor{desc("path=" + path)}}, now, nil)
		if len(as) == 0 {
			return 0, decide.Keys{}
		}
		return as[0].Call.Limits[0].Requests, as[0].Call.Keys
	}
	for path, want := range map[string]int64{
		"/api/v1/action": 5, "/api//action": 5, "/api/a/b/action": 5, "/api/action": 0, "/api/v1/actions": 0,
		"abc": 6, "axxbyyc": 6, "abbc": 6, "acb": 0, "ab": 0,
		"/files/x.txt": 7, "/files/": 7, "/files/x.png": 8, "/files/.png": 8, "/files": 0,
	} {
		if got, _ := match(path); got != want {
			t.Errorf("%s: limit %d, want %d (0: no rule)", path, got, want)
		}
	}
	if _, a := match("/files/a.png"); a != func() decide.Keys { _, b := match("/files/b.png"); return b }() {
		t.Error("share_threshold: two values of /files/*.png count apart")
	}
	if _, a := match("/api/a/action"); a == func() decide.Keys { _, b := match("/api/b/action"); return b }() {
		t.Error("without share_threshold two values of /api/*/action count together")
	}
}
