package event

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/eventschema"
)

// The schemas consumers validate against (deploy/schemas). Every event the
// encoders can legitimately produce must pass them, and they must reject
// what the services never emit.
const (
	decisionSchemaPath = "../../deploy/schemas/decision.schema.json"
	banSchemaPath      = "../../deploy/schemas/ban.schema.json"
)

func compileSchema(t *testing.T, path string) *eventschema.Schema {
	t.Helper()
	s, err := eventschema.Compile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// schemaFields returns the properties and the required fields the schema
// file declares at its top level (or under evidence).
func schemaFields(t *testing.T, path string, under ...string) (props, required []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	for _, name := range under {
		sub := s.Properties[name]
		s.Properties, s.Required = nil, nil
		if err := json.Unmarshal(sub, &s); err != nil {
			t.Fatal(err)
		}
	}
	props = slices.Sorted(maps.Keys(s.Properties))
	slices.Sort(s.Required)
	return props, s.Required
}

func keysOf(t *testing.T, msg []byte, under ...string) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	for _, name := range under {
		m = m[name].(map[string]any)
	}
	return slices.Sorted(maps.Keys(m))
}

// The schema declares exactly the fields the encoder writes: all required
// but domain and descriptors, which only rate limit API decisions carry,
// and hold, which only admitted requests that took holds carry, so
// additionalProperties false is safe.
func TestSchemaDecisionFieldsMatchEncoder(t *testing.T) {
	d := sampleDecision()
	got := keysOf(t, d.AppendJSON(nil))
	d.Domain, d.Descriptors = "edge", []Descriptor{{Entries: []Entry{{"remote_address", "203.0.113.7"}}, Code: CodeOK}}
	d.Hold = "q1Vn2oXkT0aBw3-_9zYxLg"
	all := keysOf(t, d.AppendJSON(nil))
	props, required := schemaFields(t, decisionSchemaPath)
	if !slices.Equal(props, all) || !slices.Equal(required, got) {
		t.Fatalf("encoder writes %v, with descriptors %v\nschema properties %v\nschema required %v", got, all, props, required)
	}
}

// The ban schema declares every field EncodeBan writes; all are required
// but note, actor and the evidence's sample_users, sample_sources and
// spared_sources, which are omitted when empty.
func TestSchemaBanFieldsMatchEncoder(t *testing.T) {
	b := sampleBan()
	b.Note, b.Actor = "incident 42", "ana"
	b.Evidence.SampleUsers, b.Evidence.SampleSources = []string{"u-1"}, []string{"203.0.113.7"}
	b.Evidence.SparedSources = []string{"203.0.113.10"}
	enc, err := EncodeBan(b)
	if err != nil {
		t.Fatal(err)
	}
	got := keysOf(t, enc)
	props, required := schemaFields(t, banSchemaPath)
	if !slices.Equal(props, got) {
		t.Fatalf("encoder writes %v, schema properties %v", got, props)
	}
	if want := slices.DeleteFunc(slices.Clone(got), func(k string) bool { return k == "note" || k == "actor" }); !slices.Equal(required, want) {
		t.Fatalf("schema requires %v, want %v", required, want)
	}
	gotEv := keysOf(t, enc, "evidence")
	propsEv, requiredEv := schemaFields(t, banSchemaPath, "evidence")
	optional := func(k string) bool { return k == "sample_users" || k == "sample_sources" || k == "spared_sources" }
	if !slices.Equal(propsEv, gotEv) || !slices.Equal(requiredEv, slices.DeleteFunc(slices.Clone(gotEv), optional)) {
		t.Fatalf("evidence: encoder writes %v, schema properties %v, required %v", gotEv, propsEv, requiredEv)
	}
}

// decisionCases are decisions as the limiter makes them: every reason, mode
// and algorithm, shadow reports, and hostile strings.
func decisionCases() map[string]Decision {
	base := sampleDecision() // rate_limited, sliding_window, redis
	with := func(f func(*Decision)) Decision {
		d := base
		f(&d)
		return d
	}
	noRule := func(d *Decision, reason string, allowed bool) {
		d.Reason, d.Allowed, d.RuleID, d.Algorithm, d.Limit, d.Remaining, d.RetryAfterMS, d.Shadow = reason, allowed, "", "", 0, 0, 0, false
	}
	cases := map[string]Decision{
		"contract example":   base,
		"ok":                 with(func(d *Decision) { d.Reason, d.Allowed, d.Remaining, d.RetryAfterMS = ReasonOK, true, 4, 0 }),
		"shadow":             with(func(d *Decision) { d.Allowed, d.Shadow, d.RetryAfterMS = true, true, 0 }),
		"exempt":             with(func(d *Decision) { noRule(d, ReasonExempt, true) }),
		"no_rule":            with(func(d *Decision) { noRule(d, ReasonNoRule, true) }),
		"banned":             with(func(d *Decision) { noRule(d, ReasonBanned, false); d.RetryAfterMS = 3_600_000 }),
		"banned, retry zero": with(func(d *Decision) { noRule(d, ReasonBanned, false) }),
		"ipv6 client":        with(func(d *Decision) { d.IP = "2001:db8::1" }),
		"ipv4 edge":          with(func(d *Decision) { d.IP = "0.0.0.0" }),
		"ipv6 loopback":      with(func(d *Decision) { d.IP = "::1" }),
		"no user, tier":      with(func(d *Decision) { d.UserID, d.Tier = "", "" }),
		"root endpoint":      with(func(d *Decision) { d.Endpoint = "/" }),
		"method extension":   with(func(d *Decision) { d.Method = "M-SEARCH_X" }),
		"rule id at limit":   with(func(d *Decision) { d.RuleID = "R" + strings.Repeat("a._-9", 12) + "bcd" }),
		"large numbers":      with(func(d *Decision) { d.Limit, d.Remaining, d.RetryAfterMS = 1<<53, 0, 1<<62 }),
		"concurrency hold": with(func(d *Decision) {
			d.Reason, d.Allowed, d.Algorithm, d.RetryAfterMS, d.Hold = ReasonOK, true, "concurrency", 0, "q1Vn2oXkT0aBw3-_9zYxLg"
		}),
		"allowed last unit": with(func(d *Decision) { d.Reason, d.Allowed, d.Limit, d.Remaining, d.RetryAfterMS = ReasonOK, true, 1, 0, 0 }),
		"zero timestamp":    with(func(d *Decision) { d.TS = time.Time{} }),
		"non-utc timestamp": with(func(d *Decision) { d.TS = time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", -5*3600)) }),
		"escaping": with(func(d *Decision) {
			d.Endpoint = "/a\"b\\c<d>&e\u2028f\u2029g\x00\x1f\t\n\x7f"
			d.UserID = `"quoted" \back\ <script>&amp;`
			d.Tier = "\x01tier\r\n"
		}),
		"unicode": with(func(d *Decision) {
			d.Endpoint = "/bücher/世界/🎉"
			d.UserID = "ユーザー-é"
			d.Tier = "ÜBER"
			d.Instance = "limiter-ü"
		}),
		"invalid utf-8 replaced": with(func(d *Decision) {
			d.Endpoint = "/a\xffb\xc3(c\xed\xa0\x80"
			d.UserID = "u\xe4\xb8"
		}),
	}
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_window_counter", "token_bucket"} {
		cases["algorithm "+alg] = with(func(d *Decision) { d.Algorithm = alg })
		cases["algorithm "+alg+" ok"] = with(func(d *Decision) { d.Algorithm, d.Reason, d.Allowed, d.RetryAfterMS = alg, ReasonOK, true, 0 })
	}
	for _, mode := range []string{"redis", "local", "permissive"} {
		cases["mode "+mode] = with(func(d *Decision) { d.Mode = mode })
		cases["mode "+mode+" exempt"] = with(func(d *Decision) { d.Mode = mode; noRule(d, ReasonExempt, true) })
	}
	return cases
}

func TestSchemaAcceptsDecisions(t *testing.T) {
	s := compileSchema(t, decisionSchemaPath)
	reasons := map[string]bool{}
	for name, d := range decisionCases() {
		t.Run(name, func(t *testing.T) {
			enc := d.AppendJSON(nil)
			if err := s.Validate(enc); err != nil {
				t.Fatalf("%s\n%v", enc, err)
			}
		})
		reasons[d.Reason] = true
	}
	for _, r := range []string{ReasonOK, ReasonRateLimited, ReasonBanned, ReasonExempt, ReasonNoRule} {
		if !reasons[r] {
			t.Errorf("no case with reason %s", r)
		}
	}
}

// mutated returns the JSON of msg after f changed its fields.
func mutated(t *testing.T, msg []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type rejectCase struct {
	name string
	msg  []byte
	want string // in the validation error: what it must be rejected for
}

func checkRejects(t *testing.T, s *eventschema.Schema, cases []rejectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(tc.msg)
			if err == nil {
				t.Fatalf("accepted %s", tc.msg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rejected %s\nfor %v\nwant an error containing %q", tc.msg, err, tc.want)
			}
		})
	}
}

func TestSchemaRejectsDecisions(t *testing.T) {
	s := compileSchema(t, decisionSchemaPath)
	base := sampleDecision()
	good := base.AppendJSON(nil)
	if err := s.Validate(good); err != nil {
		t.Fatal(err)
	}
	set := func(field string, v any) []byte {
		return mutated(t, good, func(m map[string]any) { m[field] = v })
	}
	exempt := base
	exempt.Reason, exempt.Allowed, exempt.RuleID, exempt.Algorithm, exempt.RetryAfterMS = ReasonExempt, true, "", "", 0
	exemptJSON := exempt.AppendJSON(nil)
	var cases []rejectCase
	for _, f := range keysOf(t, good) {
		cases = append(cases, rejectCase{"missing " + f, mutated(t, good, func(m map[string]any) { delete(m, f) }), "missing property '" + f + "'"})
	}
	cases = append(cases, []rejectCase{
		{"not an object", []byte(`["event_id"]`), "want object"},
		{"not json", []byte(`{"event_id":`), "not JSON"},
		{"unknown field", set("future", 1), "additional properties 'future'"},
		{"limit as string", set("limit", "5"), "'/limit'"},
		{"limit fractional", set("limit", 1.5), "'/limit'"},
		{"remaining negative", set("remaining", -1), "'/remaining'"},
		{"retry negative", set("retry_after_ms", -740), "'/retry_after_ms'"},
		{"allowed as string", set("allowed", "false"), "'/allowed'"},
		{"shadow null", set("shadow", nil), "'/shadow'"},
		{"user_id null", set("user_id", nil), "'/user_id'"},
		{"unknown reason", set("reason", "maybe"), "'/reason'"},
		{"reason in capitals", set("reason", "RATE_LIMITED"), "'/reason'"},
		{"unknown mode", set("mode", "cloud"), "'/mode'"},
		{"unknown algorithm", set("algorithm", "leaky_bucket"), "'/algorithm'"},
		{"event_id not a uuid", set("event_id", "e-1"), "'/event_id'"},
		{"ts not a time", set("ts", "yesterday"), "'/ts'"},
		{"ts with offset", set("ts", "2026-11-21T11:30:00.123456+01:00"), "'/ts'"},
		{"ts in milliseconds", set("ts", "2026-11-21T10:30:00.123Z"), "'/ts'"},
		{"ts invalid date", set("ts", "2026-02-30T10:30:00.123456Z"), "'/ts'"},
		{"ip not an ip", set("ip", "example.com"), "'/ip'"},
		{"ip empty", set("ip", ""), "'/ip'"},
		{"ip with zone", set("ip", "fe80::1%eth0"), "'/ip'"},
		{"ip with port", set("ip", "203.0.113.7:443"), "'/ip'"},
		{"endpoint empty", set("endpoint", ""), "'/endpoint'"},
		{"endpoint not normalized", set("endpoint", "api/books"), "'/endpoint'"},
		{"method lower case", set("method", "get"), "'/method'"},
		{"method empty", set("method", ""), "'/method'"},
		{"instance empty", set("instance", ""), "'/instance'"},
		{"rule id invalid", set("rule_id", "-bad id"), "'/rule_id'"},
		{"rate limited without rule", mutated(t, good, func(m map[string]any) { m["rule_id"], m["algorithm"] = "", "" }), "'/rule_id'"},
		{"ok without algorithm", mutated(t, good, func(m map[string]any) {
			m["reason"], m["allowed"], m["retry_after_ms"], m["algorithm"] = "ok", true, 0, ""
		}), "'/algorithm'"},
		{"ok denied", set("reason", "ok"), "'/allowed'"},
		{"denied shadow", set("shadow", true), "oneOf"},
		{"allowed rate limited without shadow", mutated(t, good, func(m map[string]any) { m["allowed"], m["retry_after_ms"] = true, 0 }), "oneOf"},
		{"shadow ok", mutated(t, good, func(m map[string]any) {
			m["reason"], m["allowed"], m["shadow"], m["retry_after_ms"] = "ok", true, true, 0
		}), "'/reason'"},
		{"allowed with a retry", mutated(t, good, func(m map[string]any) { m["reason"], m["allowed"] = "ok", true }), "'/retry_after_ms'"},
		{"exempt with a rule", mutated(t, exemptJSON, func(m map[string]any) { m["rule_id"] = "r" }), "'/rule_id'"},
		{"exempt with an algorithm", mutated(t, exemptJSON, func(m map[string]any) { m["algorithm"] = "token_bucket" }), "'/algorithm'"},
		{"exempt denied", mutated(t, exemptJSON, func(m map[string]any) { m["allowed"] = false }), "'/allowed'"},
		{"no_rule shadow", mutated(t, exemptJSON, func(m map[string]any) { m["reason"], m["shadow"] = "no_rule", true }), "'/shadow'"},
		{"banned allowed", mutated(t, exemptJSON, func(m map[string]any) { m["reason"] = "banned" }), "'/allowed'"},
		{"zero decision", (&Decision{}).AppendJSON(nil), "'/event_id'"},
	}...)
	checkRejects(t, s, cases)
}

// banCases are bans, unbans and warnings as the detector and the admin API
// issue them.
func banCases() map[string]Ban {
	base := sampleBan() // detector ban of an IP for scan
	base.BanID = "0f4c2a9e-7d2b-8c1e-9a3f-5b6d7e8f9a0b"
	with := func(f func(*Ban)) Ban {
		b := base
		f(&b)
		return b
	}
	ts := base.TS
	admin := func(b *Ban, action string) {
		b.BanID, b.Action, b.Reason, b.Source = "9b2e4f7a-1c3d-4e5f-8a6b-7c8d9e0f1a2b", action, "manual", "admin"
		b.Count, b.Threshold, b.WindowS, b.DryRun, b.Evidence = 0, 0, 0, false, Evidence{}
		if action == ActionUnban {
			b.DurationS, b.ExpiresAt = 0, time.Time{}
		}
	}
	warn := func(b *Ban) {
		b.Action, b.Reason, b.DurationS, b.ExpiresAt = ActionWarn, "violations_5m", 0, time.Time{}
	}
	return map[string]Ban{
		"detector scan ban":     base,
		"detector ipv6 ban":     with(func(b *Ban) { b.Subject = "2001:db8::7" }),
		"detector ipv6 /64 ban": with(func(b *Ban) { b.Subject = "2001:db8:1:2::/64" }),
		"detector ipv6 /48 ban": with(func(b *Ban) { b.Subject = "2001:db8:1::/48" }),
		"detector ipv6 /32 ban": with(func(b *Ban) { b.Subject = "2001:db8::/32" }),
		"detector ipv6 /127":    with(func(b *Ban) { b.Subject = "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe/127" }),
		"ipv6 /64 of ::":        with(func(b *Ban) { b.Subject = "::/64" }),
		"ipv6 warning":          with(func(b *Ban) { warn(b); b.Subject = "2001:db8:1:2::/64" }),
		"detector user ban":     with(func(b *Ban) { b.Scope, b.Subject, b.Reason = ScopeUser, "u-42", "violations_1h" }),
		"detector dry run":      with(func(b *Ban) { b.DryRun = true }),
		"detector warning":      with(warn),
		"detector user warning": with(func(b *Ban) { warn(b); b.Scope, b.Subject = ScopeUser, "u-42" }),
		"violations in seconds": with(func(b *Ban) { b.Reason = "violations_90s" }),
		"violations in ms":      with(func(b *Ban) { b.Reason = "violations_500ms" }),
		"violations in us":      with(func(b *Ban) { b.Reason = "violations_1500us" }),
		"violations in ns":      with(func(b *Ban) { b.Reason = "violations_1000001ns" }),
		"escalated, capped":     with(func(b *Ban) { b.DurationS, b.ExpiresAt = 86400, ts.Add(24*time.Hour) }),
		"longest ban":           with(func(b *Ban) { b.DurationS, b.ExpiresAt = 9223372036, ts.Add(time.Duration(1<<63-1)) }),
		"no evidence times":     with(func(b *Ban) { b.Evidence = Evidence{} }),
		"fifty samples":         with(func(b *Ban) { b.Evidence.SampleEndpoints = slices.Repeat([]string{"/x"}, 50) }),
		"credential stuffing": with(func(b *Ban) {
			b.Reason, b.Evidence.SampleUsers = "credential_stuffing", []string{"u-1", "\"<u>\" é"}
		}),
		"brute force": with(func(b *Ban) { b.Reason = "brute_force" }),
		"probing":     with(func(b *Ban) { b.Reason = "probing" }),
		"account attack source ban": with(func(b *Ban) {
			b.Reason, b.Evidence.SampleUsers = "account_attack", []string{"u-42"}
		}),
		"account attack warning": with(func(b *Ban) {
			warn(b)
			b.Scope, b.Subject, b.Reason = ScopeUser, "u-42", "account_attack"
			b.Evidence.SampleSources = []string{"203.0.113.7", "2001:db8:1:2::/64"}
			b.Evidence.SparedSources = []string{"198.51.100.10"}
		}),
		"hostile samples": with(func(b *Ban) {
			b.Evidence.SampleEndpoints = []string{"/a\"b\\c<d>&e\u2028\x00", "/bücher/🎉", "/\xff"}
		}),
		"hostile user": with(func(b *Ban) {
			b.Scope, b.Subject = ScopeUser, "\"<u>\" \\ ユーザー \u2029 \x01 \xff"
		}),
		"admin ban with note": with(func(b *Ban) {
			admin(b, ActionBan)
			b.DurationS, b.ExpiresAt, b.Note = 3600, ts.Add(time.Hour), "incident 42: <script> & \"quotes\" é"
		}),
		"admin ban note at limit": with(func(b *Ban) { admin(b, ActionBan); b.Note = strings.Repeat("é", 128) }),
		"admin ban without note":  with(func(b *Ban) { admin(b, ActionBan); b.DurationS, b.ExpiresAt = 1, ts.Add(time.Second) }),
		"admin user ban":          with(func(b *Ban) { admin(b, ActionBan); b.Scope, b.Subject = ScopeUser, "u 42/é" }),
		"admin unban":             with(func(b *Ban) { admin(b, ActionUnban) }),
		"admin unban ipv6":        with(func(b *Ban) { admin(b, ActionUnban); b.Subject = "fe80::1" }),
		"admin ban ipv6 prefix":   with(func(b *Ban) { admin(b, ActionBan); b.Subject = "2001:db8:0:7::/64" }),
	}
}

func TestSchemaAcceptsBans(t *testing.T) {
	s := compileSchema(t, banSchemaPath)
	actions, sources := map[string]bool{}, map[string]bool{}
	for name, b := range banCases() {
		t.Run(name, func(t *testing.T) {
			enc, err := EncodeBan(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(enc); err != nil {
				t.Fatalf("%s\n%v", enc, err)
			}
		})
		actions[b.Action+"/"+b.Scope], sources[b.Source] = true, true
	}
	for _, a := range []string{"ban/ip", "ban/user", "warn/ip", "warn/user", "unban/ip"} {
		if !actions[a] {
			t.Errorf("no case with action/scope %s", a)
		}
	}
	if !sources["detector"] || !sources["admin"] {
		t.Errorf("sources covered: %v", sources)
	}
}

func TestSchemaRejectsBans(t *testing.T) {
	s := compileSchema(t, banSchemaPath)
	cases := banCases()
	enc := func(name string) []byte {
		b, err := EncodeBan(cases[name])
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	good, warn, unban, adminBan := enc("detector scan ban"), enc("detector warning"), enc("admin unban"), enc("admin ban with note")
	set := func(msg []byte, field string, v any) []byte {
		return mutated(t, msg, func(m map[string]any) { m[field] = v })
	}
	setEvidence := func(field string, v any) []byte {
		return mutated(t, good, func(m map[string]any) { m["evidence"].(map[string]any)[field] = v })
	}
	var rejects []rejectCase
	for _, f := range keysOf(t, good) {
		rejects = append(rejects, rejectCase{"missing " + f, mutated(t, good, func(m map[string]any) { delete(m, f) }), "missing property '" + f + "'"})
	}
	for _, f := range keysOf(t, good, "evidence") {
		rejects = append(rejects, rejectCase{"missing evidence." + f,
			mutated(t, good, func(m map[string]any) { delete(m["evidence"].(map[string]any), f) }), "missing property '" + f + "'"})
	}
	rejects = append(rejects, []rejectCase{
		{"unknown field", set(good, "severity", "high"), "additional properties 'severity'"},
		{"unknown evidence field", setEvidence("asn", 64500), "additional properties 'asn'"},
		{"unknown action", set(good, "action", "kill"), "'/action'"},
		{"unknown scope", set(good, "scope", "asn"), "'/scope'"},
		{"unknown source", set(good, "source", "firewall"), "'/source'"},
		{"unknown reason", set(good, "reason", "flood"), "'/reason'"},
		{"reason without window", set(good, "reason", "violations_"), "'/reason'"},
		{"reason with a bad unit", set(good, "reason", "violations_1d"), "'/reason'"},
		{"ban_id not a uuid", set(good, "ban_id", "ban-1"), "'/ban_id'"},
		{"ts not a time", set(good, "ts", "now"), "'/ts'"},
		{"ts with offset", set(good, "ts", "2026-11-21T11:30:00.123456+01:00"), "'/ts'"},
		{"count as string", set(good, "count", "57"), "'/count'"},
		{"count negative", set(good, "count", -1), "'/count'"},
		{"duration fractional", set(good, "duration_s", 1.5), "'/duration_s'"},
		{"dry_run as string", set(good, "dry_run", "false"), "'/dry_run'"},
		{"subject empty", set(good, "subject", ""), "'/subject'"},
		{"ip subject not an ip", set(good, "subject", "u-42"), "'/subject'"},
		{"ip subject an ipv4 prefix", set(good, "subject", "203.0.113.0/24"), "'/subject'"},
		{"ip subject an ipv6 prefix under /32", set(good, "subject", "2001::/16"), "'/subject'"},
		{"ip subject an ipv6 /128", set(good, "subject", "2001:db8::1/128"), "'/subject'"},
		{"ip subject an upper-case prefix", set(good, "subject", "2001:DB8::/64"), "'/subject'"},
		{"ip subject a prefix with a zone", set(good, "subject", "fe80::%eth0/64"), "'/subject'"},
		{"ip subject a prefix of garbage", set(good, "subject", "2001:db8:::/64"), "'/subject'"},
		{"ip subject a prefix with a bad length", set(good, "subject", "2001:db8::/064"), "'/subject'"},
		{"evidence null", set(good, "evidence", nil), "'/evidence'"},
		{"samples null", setEvidence("sample_endpoints", nil), "'/evidence/sample_endpoints'"},
		{"samples not strings", setEvidence("sample_endpoints", []any{1}), "'/evidence/sample_endpoints/0'"},
		{"too many samples", setEvidence("sample_endpoints", slices.Repeat([]any{"/x"}, 51)), "'/evidence/sample_endpoints'"},
		{"first_ts not a time", setEvidence("first_ts", "earlier"), "'/evidence/first_ts'"},
		{"ban without expiry", set(good, "expires_at", nil), "'/expires_at'"},
		{"ban without duration", set(good, "duration_s", 0), "'/duration_s'"},
		{"expires_at not a time", set(good, "expires_at", "soon"), "'/expires_at'"},
		{"warning with expiry", set(warn, "expires_at", "2026-11-21T11:30:00.123456Z"), "'/expires_at'"},
		{"warning with duration", set(warn, "duration_s", 3600), "'/duration_s'"},
		{"unban with expiry", set(unban, "expires_at", "2026-11-21T11:30:00.123456Z"), "'/expires_at'"},
		{"detector unban", set(good, "action", "unban"), "'/action'"},
		{"detector manual", set(good, "reason", "manual"), "'/reason'"},
		{"detector with note", set(good, "note", "hi"), "'not' failed"},
		{"admin warning", set(unban, "action", "warn"), "'/action'"},
		{"admin scan", set(adminBan, "reason", "scan"), "'/reason'"},
		{"admin with count", set(adminBan, "count", 3), "'/count'"},
		{"admin dry run", set(adminBan, "dry_run", true), "'/dry_run'"},
		{"admin with evidence", mutated(t, adminBan, func(m map[string]any) {
			m["evidence"] = map[string]any{"first_ts": nil, "last_ts": nil, "sample_endpoints": []any{"/a"}}
		}), "'/evidence/sample_endpoints'"},
		{"note empty", set(adminBan, "note", ""), "'/note'"},
		{"note too long", set(adminBan, "note", strings.Repeat("x", 257)), "'/note'"},
		{"note not a string", set(adminBan, "note", 42), "'/note'"},
	}...)
	checkRejects(t, s, rejects)
}
