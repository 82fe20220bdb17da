package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"go.yaml.in/yaml/v3"
)

const examplePath = "../../deploy/rules.example.yaml"

func TestExampleFileLoadsAndCompiles(t *testing.T) {
	f, err := LoadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(s.Match(&Request{IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST", UserID: "u"}, time.Now(), nil)); !reflect.DeepEqual(got, []string{"login-per-ip", "login-failures"}) {
		t.Errorf("login matches %v", got)
	}
	if got, want := s.Tiers(), []string{"SUPER_ADMIN", "VIP"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Tiers() = %v, want %v", got, want)
	}
	login := s.Rule("login-per-ip")
	if login.Priority != 10 || login.Penalty.Std() != 5*time.Minute || login.OnRedisFailure != FailLocal {
		t.Errorf("login-per-ip = %+v", login)
	}
	if books := s.Rule("books-by-tier"); books.Priority != 100 || books.Algorithm != decide.TokenBucket {
		t.Errorf("books-by-tier = %+v", books)
	}
	// The example spells out every detection setting at its default.
	if !reflect.DeepEqual(f.Detection, DefaultDetection()) {
		t.Errorf("example detection = %+v, want the defaults", f.Detection)
	}
}

// The commented schedule and escalate examples must stay valid.
func TestExampleFileCommentedBlocksAreValid(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	uncommented := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "    #   ") || line == "    # schedule:\n" || line == "    # escalate:\n" {
			line = line[:4] + line[6:]
			uncommented++
		}
		out = append(out, line)
	}
	if uncommented < 8 {
		t.Fatalf("found only %d commented example lines", uncommented)
	}
	f := mustParse(t, strings.Join(out, ""))
	login := f.Rules[0]
	if len(login.Schedule) != 2 || len(login.Escalate) != 2 || login.Schedule[1].Daily.TZ != "Europe/Paris" {
		t.Errorf("schedule, escalate = %+v, %+v", login.Schedule, login.Escalate)
	}
	if _, err := Compile(f, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestParseDefaults(t *testing.T) {
	f := mustParse(t, `
rules:
  - id: r1
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1s}]
  - id: r0
    priority: 0
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1s}]
    on_redis_failure: deny
`)
	r := f.Rules[0]
	if r.Priority != 100 || r.OnRedisFailure != FailLocal || r.Penalty != 0 || r.Shadow {
		t.Errorf("defaults = %+v", r)
	}
	if f.Rules[1].Priority != 0 || f.Rules[1].OnRedisFailure != FailDeny {
		t.Errorf("explicit values lost: %+v", f.Rules[1])
	}
	if !reflect.DeepEqual(f.Detection, DefaultDetection()) {
		t.Errorf("detection = %+v, want defaults", f.Detection)
	}
	t.Run("partial detection", func(t *testing.T) {
		f := mustParse(t, "rules: []\ndetection: {dry_run: true, warn: {violations: 3, within: 1m}}\n")
		d := f.Detection
		if !d.DryRun || d.Warn.Violations != 3 || d.Warn.Within.Std() != time.Minute {
			t.Errorf("warn = %+v", d.Warn)
		}
		def := DefaultDetection()
		if !reflect.DeepEqual(d.Ban, def.Ban) || !reflect.DeepEqual(d.Scan, def.Scan) {
			t.Errorf("ban, scan = %+v, %+v", d.Ban, d.Scan)
		}
	})
	t.Run("detection scalars", func(t *testing.T) {
		def := DefaultDetection()
		if def.Grace.Std() != 30*time.Second || def.Samples != 5 || def.MaxClockSkew.Std() != time.Minute ||
			def.Escalation != (EscalationPolicy{Factor: 2, Cap: dur(24 * time.Hour), Period: dur(24 * time.Hour)}) {
			t.Fatalf("DefaultDetection() = %+v", def)
		}
		tests := []struct {
			name, yaml string
			want       func(*Detection)
		}{
			{"absent", "rules: []\ndetection: {dry_run: true}\n", func(d *Detection) { d.DryRun = true }},
			{"zero means default", "rules: []\ndetection: {grace: 0s, samples: 0, max_clock_skew: 0s, escalation: {factor: 0}}\n", func(*Detection) {}},
			{"partial escalation", "rules: []\ndetection: {escalation: {factor: 3}}\n", func(d *Detection) { d.Escalation.Factor = 3 }},
			{"every key", "rules: []\ndetection: {grace: 5s, samples: 50, max_clock_skew: 1h, escalation: {factor: 1, cap: 1h, period: 7h}}\n", func(d *Detection) {
				d.Grace, d.Samples, d.MaxClockSkew = dur(5*time.Second), 50, dur(time.Hour)
				d.Escalation = EscalationPolicy{Factor: 1, Cap: dur(time.Hour), Period: dur(7 * time.Hour)}
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				want := DefaultDetection()
				tt.want(&want)
				if got := mustParse(t, tt.yaml).Detection; !reflect.DeepEqual(got, want) {
					t.Errorf("detection = %+v\nwant %+v", got, want)
				}
			})
		}
		t.Run("hand-built file", func(t *testing.T) {
			s, err := Compile(&File{Detection: Detection{Samples: 7}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultDetection()
			want.Samples = 7
			if got := s.Detection(); !reflect.DeepEqual(got, want) {
				t.Errorf("Detection() = %+v", got)
			}
		})
	})
	t.Run("empty ban list disables", func(t *testing.T) {
		if f := mustParse(t, "rules: []\ndetection: {ban: []}\n"); len(f.Detection.Ban) != 0 {
			t.Errorf("ban = %+v", f.Detection.Ban)
		}
	})
}

func TestParseYAMLFields(t *testing.T) {
	f := mustParse(t, `
rules:
  - id: all-fields
    priority: -5
    match: {endpoints: ["/a/**"], methods: [get, Post], tiers: [basic]}
    key: [ip, "attr:app_key"]
    algorithm: sliding_window
    limits: [{requests: 5, per: 500ms}, {requests: 50, per: 1h}]
    penalty: 1m30s
    shadow: true
    on_redis_failure: allow
    tiers: {gold: [{requests: 10, per: 500ms}]}
    schedule:
      - from: 2026-01-01T00:00:00Z
        to: "2026-01-02T00:00:00+01:00"
        limits: [{requests: 1, per: 1s}]
        penalty: 0s
      - daily: {from: 09:00, to: "17:30", tz: America/New_York}
        limits: [{requests: 2, per: 1s}]
        tiers: {gold: [{requests: 3, per: 1s}]}
    escalate:
      - {triggers: 3, within: 10m, penalty: 1h, from: 2026-01-01T00:00:00Z}
`)
	r := f.Rules[0]
	if r.Priority != -5 || !r.Shadow || r.OnRedisFailure != FailAllow || r.Penalty.Std() != 90*time.Second {
		t.Errorf("rule = %+v", r)
	}
	if r.Limits[0].Per.Std() != 500*time.Millisecond || r.Tiers["gold"][0].Requests != 10 {
		t.Errorf("limits = %+v, tiers = %+v", r.Limits, r.Tiers)
	}
	e0, e1 := r.Schedule[0], r.Schedule[1]
	if !e0.From.Equal(mustTime(t, "2026-01-01T00:00:00Z")) || !e0.To.Equal(mustTime(t, "2026-01-01T23:00:00Z")) || *e0.Penalty != 0 {
		t.Errorf("schedule[0] = %+v", e0)
	}
	if *e1.Daily != (Daily{From: "09:00", To: "17:30", TZ: "America/New_York"}) || e1.Penalty != nil {
		t.Errorf("schedule[1] = %+v", e1)
	}
	if esc := r.Escalate[0]; esc.Triggers != 3 || esc.Penalty.Std() != time.Hour || esc.From.IsZero() || !esc.To.IsZero() {
		t.Errorf("escalate = %+v", esc)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"syntax error has the line", "rules:\n  - id: a\n    key: [ip\n", "yaml: line 2"},
		{"bad indentation", "rules:\n- id: a\n  key: [ip]\n bad: 1\n", "yaml: line 3"},
		{"unknown rule field", "rules:\n  - id: a\n    keys: [ip]\n", `rule "a": line 3: unknown key "keys" (did you mean "key"?)`},
		{"unknown top-level field", "rulez: []\n", `line 1: unknown key "rulez" (did you mean "rules"?)`},
		{"unknown limit field", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s, window: 2}]}\n", `rule "a": line 2: unknown key "window" (valid keys: burst, concurrent, hold, per, rate, requests)`},
		{"unknown detection field", "rules: []\ndetection: {warn: {violations: 1, within: 1s, level: 3}}\n", `line 2: unknown key "level" (valid keys: violations, within)`},
		{"duration without unit", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 60}]}\n", `rule "a": line 2: per: invalid duration "60"`},
		{"duration as list", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, penalty: [1s], limits: [{requests: 1, per: 1s}]}\n", "duration must be a string"},
		{"duplicate yaml key", "rules:\n  - id: a\n    id: b\n", "already defined"},
		{"two documents", "rules: []\n---\nrules: []\n", "one YAML document"},
		{"empty file", "", "rules file is empty"},
		{"comments only", "# nothing\n", "rules file is empty"},
		{"not a mapping", "- a\n", "line 1: want a mapping, got a list"},
		{"bad time", "rules:\n  - id: a\n    escalate: [{triggers: 1, within: 1s, penalty: 1s, from: tomorrow}]\n", `rule "a": line 3: from: invalid time "tomorrow"`},
		{"invalid rule refused", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 0, per: 1s}]}\n", `rule "a": limits[0].requests: must be between 1 and 2^53`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - id: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `rule "x": key: required`) {
		t.Errorf("LoadFile = %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseRuleJSON(t *testing.T) {
	t.Run("valid with durations as strings", func(t *testing.T) {
		r, err := ParseRuleJSON([]byte(`{"id": "api-json", "key": ["user_id"], "algorithm": "token_bucket",
			"match": {"endpoints": ["/api/**"], "methods": ["get"]},
			"limits": [{"rate": 10, "per": "1m", "burst": 20}], "penalty": "30s",
			"tiers": {"VIP": [{"rate": 100, "per": "1m", "burst": 200}]},
			"schedule": [{"daily": {"from": "22:00", "to": "06:00", "tz": "Europe/Paris"}, "limits": [{"rate": 1, "per": "1m", "burst": 2}]}],
			"escalate": [{"triggers": 5, "within": "10m", "penalty": "1h", "to": "2027-01-01T00:00:00Z"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if r.Priority != 100 || r.OnRedisFailure != FailLocal || r.Limits[0].Per.Std() != time.Minute || r.Penalty.Std() != 30*time.Second {
			t.Errorf("rule = %+v", r)
		}
		if r.Escalate[0].Within.Std() != 10*time.Minute || r.Escalate[0].To.Year() != 2027 {
			t.Errorf("escalate = %+v", r.Escalate)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		f := mustParse(t, "rules:\n  - {id: rt, key: [ip], algorithm: fixed_window, limits: [{requests: 5, per: 1m30s}], penalty: 250ms, ipv6_prefix: 56}\n")
		data, err := json.Marshal(f.Rules[0])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"per":"1m30s"`) || !strings.Contains(string(data), `"penalty":"250ms"`) || !strings.Contains(string(data), `"ipv6_prefix":56`) {
			t.Errorf("JSON = %s", data)
		}
		r, err := ParseRuleJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, f.Rules[0]) {
			t.Errorf("round trip = %+v, want %+v", r, f.Rules[0])
		}
	})
	errTests := []struct{ name, json, want string }{
		{"unknown field", `{"id": "a", "foo": 1}`, `rule "a": foo: unknown field`},
		{"unknown field and a type error after it", `{"id": "a", "foo": 1, "priority": "high"}`, "priority: cannot use string: want an integer"},
		{"misspelt field", `{"id": "a", "algoritm": "fixed_window"}`, `rule "a": algoritm: unknown field (did you mean "algorithm"?)`},
		{"misspelt field of a limit", `{"id": "a", "limits": [{"requests": 1, "pr": "1s"}]}`, `limits[0].pr: unknown field (did you mean "per"?)`},
		{"duration as number", `{"id": "a", "limits": [{"requests": 1, "per": 60}]}`, "limits.per: cannot use 60: want a duration string"},
		{"bad duration string", `{"id": "a", "penalty": "5 minutes"}`, `penalty: cannot use string "5 minutes"`},
		{"wrong type", `{"id": "a", "priority": "high"}`, "priority: cannot use string: want an integer"},
		{"trailing data", `{"id": "a"} {}`, "unexpected data"},
		{"syntax", `{"id": `, "unexpected EOF"},
		{"invalid rule", `{"id": "a", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 1, "per": "0s"}]}`, `rule "a": limits[0].per: must be at least 1ms`},
		{"ipv6 prefix out of range", `{"id": "a", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 1, "per": "1s"}], "ipv6_prefix": 129}`, `rule "a": ipv6_prefix: must be between 32 and 128`},
		{"ipv6 prefix as string", `{"id": "a", "ipv6_prefix": "64"}`, "ipv6_prefix: cannot use string: want an integer"},
		{"number for a limit", `{"id": "a", "tiers": {"VIP": [0]}}`, "tiers: cannot use number: want an object"},
		{"object for a list", `{"id": "a", "key": {"ip": 1}}`, "key: cannot use object: want a list"},
		{"missing id", `{"key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 1, "per": "1s"}]}`, "id: required"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRuleJSON([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseRuleJSON error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Durations are written back as the rules file writes them (GET
// /v1/admin/rules shows a 1m window as "1m", not "1m0s"), in JSON and YAML.
func TestDurationYAMLAndJSON(t *testing.T) {
	for _, s := range []string{"500ms", "10s", "5m", "1h", "1h30m", "30s", "1m30s", "1h0m30s", "0s", "1.5s", "24h"} {
		t.Run(s, func(t *testing.T) {
			d, err := parseDuration(s)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace(s, "h0m", "h", 1) // 1h0m30s is written 1h30s
			b, _ := json.Marshal(d)
			var back Duration
			if err := json.Unmarshal(b, &back); err != nil || back != d || string(b) != `"`+want+`"` {
				t.Errorf("JSON %s -> %v (%v); want %q", b, back, err, want)
			}
			y, err := yaml.Marshal(struct {
				Per Duration `yaml:"per"`
			}{d})
			if err != nil || string(y) != "per: "+want+"\n" {
				t.Errorf("YAML %q (%v); want per: %s", y, err, want)
			}
		})
	}
	if _, err := parseDuration("1 day"); err == nil {
		t.Error("1 day accepted")
	}
}

func FuzzParse(f *testing.F) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n"))
	f.Add([]byte("rules: []\nexempt: {ips: [\"::ffff:10.0.0.0/104\"]}\n"))
	f.Add([]byte("rules:\n  - {id: l, key: [ip], algorithm: sliding_window_counter, limits: [{requests: 64, per: 1s}], lease: {max_units: 2}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		s, err := Compile(file, Options{})
		if err != nil {
			t.Fatalf("parsed file does not compile: %v", err)
		}
		s.Match(request("192.0.2.1", "/api/login"), time.Now(), nil)
		s.Exempt(request("192.0.2.1", "/api/login"))
	})
}

func FuzzParseRuleJSON(f *testing.F) {
	f.Add([]byte(`{"id": "a", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 1, "per": "1s"}]}`))
	f.Add([]byte(`{"id": "l", "key": ["ip"], "algorithm": "token_bucket", "limits": [{"rate": 1, "per": "1s", "burst": 9}], "lease": {"max_units": 4}}`))
	f.Add([]byte(`{"id": "f", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 1, "per": "1s"}], "lease": false}`))
	f.Add([]byte(`{"id": "b", "key": ["user_id", "attr:k"], "algorithm": "token_bucket", "limits": [{"rate": 1, "per": "1m", "burst": 5}],
		"schedule": [{"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "limits": [{"rate": 2, "per": "1m", "burst": 5}], "penalty": "1s"}],
		"escalate": [{"triggers": 2, "within": "1m", "penalty": "1h", "from": "2026-01-01T00:00:00+02:00"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRuleJSON(data)
		if err != nil {
			return
		}
		back, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseRuleJSON(back)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", back, err)
		}
		if _, err := Compile(&File{Rules: []Rule{r2}}, Options{}); err != nil {
			t.Fatalf("valid rule does not compile: %v", err)
		}
	})
}

func TestLoadFileReportsEveryProblem(t *testing.T) {
	_, err := LoadFile("testdata/invalid.yaml")
	if err == nil {
		t.Fatal("invalid file loaded")
	}
	for _, want := range []string{
		`rule "login-per-ip": limits[1].per: must be at least 1ms`,
		`rule "books": key[1]: duplicate dimension "user_id" (also key[0])`,
		`rule "books": limits[0].requests: not allowed with algorithm token_bucket`,
		`rule "books": limits[0].rate: must be between 1 and 2^53`,
		`rule "books": limits[0].burst: must be at least 1`,
		`rule "login-per-ip": id: duplicate (also rules[0])`,
		`rule "login-per-ip": algorithm: unknown "leaky"`,
		`rules[3].id: required`,
		`exempt.ips[0]: "not-an-ip" is not an IP address or CIDR`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := len(FieldErrors(err)); n != 9 {
		t.Errorf("%d field errors, want 9:\n%v", n, err)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, string(data))
	f.Rules[0].Schedule = []ScheduleEntry{{
		From: ts("2026-11-27T00:00:00Z"), To: ts("2026-11-28T00:00:00+01:00"),
		Limits: []Limit{reqs(1, time.Second)},
	}, {
		Daily: &Daily{From: "22:00", To: "06:00", TZ: "Europe/Paris"}, Limits: []Limit{reqs(2, time.Second)},
	}}
	f.Rules[0].Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute), Penalty: dur(time.Hour), To: ts("2027-01-01T00:00:00Z")}}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	back := mustParse(t, string(out))
	again, err := yaml.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("YAML round trip differs:\n%s\n---\n%s", out, again)
	}
	if !back.Rules[0].Schedule[0].To.Equal(f.Rules[0].Schedule[0].To.Time) || back.Rules[0].Penalty != f.Rules[0].Penalty {
		t.Errorf("values lost: %+v", back.Rules[0])
	}
}

// The admin API promises every field at fault: each unknown field is a
// FieldError naming its path, beside the rule's other problems.
func TestParseRuleJSONUnknownFields(t *testing.T) {
	_, err := ParseRuleJSON([]byte(`{"id": "a", "colour": "red", "key": ["ip"], "algorithm": "fixed_window",
		"match": {"endpoints": ["/a"], "verbs": ["GET"]},
		"limits": [{"requests": 0, "per": "1s"}, {"requests": 1, "per": "1m", "every": 2}],
		"tiers": {"VIP": [{"requests": 2, "per": "1s", "x": 1}]},
		"schedule": [{"daily": {"from": "22:00", "to": "06:00", "zone": "UTC"}, "limits": [{"requests": 1, "per": "1s"}]}]}`))
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field+": "+fe.Reason)
	}
	want := []string{
		"colour: unknown field",
		"match.verbs: unknown field",
		"limits[1].every: unknown field",
		"tiers.VIP[0].x: unknown field",
		"schedule[0].daily.zone: unknown field",
		"limits[0].requests: must be between 1 and 2^53",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("field errors of %v:\n got %q\nwant %q", err, got, want)
	}
	if fe := FieldErrors(err); fe[0].RuleID != "a" {
		t.Errorf("RuleID = %q; want the rule's id", fe[0].RuleID)
	}
}

// The unknown fields of a rule are listed up to maxUnknownFields, the rest
// counted, and each path shows a key shortened (quoted when it is not
// printable): an admin request of 64 KiB once answered 128 MB, a 32 KB
// tier name repeated in the path of each of 4000 unknown fields.
func TestParseRuleJSONUnknownFieldsBounded(t *testing.T) {
	long := strings.Repeat("K", 32000)
	items := strings.TrimSuffix(strings.Repeat(`{"z":0},`, 4000), ",")
	_, err := ParseRuleJSON([]byte(`{"id": "a", "key": ["ip"], "algorithm": "fixed_window", "match": {"endpoints": ["/a"]},
		"limits": [{"requests": 1, "per": "1s"}], "tiers": {"` + long + `": [` + items + `]}}`))
	var unknown []*FieldError
	for _, fe := range FieldErrors(err) {
		if strings.HasPrefix(fe.Reason, "unknown field") {
			unknown = append(unknown, fe)
		}
	}
	if len(unknown) != maxUnknownFields+1 {
		t.Fatalf("%d unknown fields listed, want %d", len(unknown), maxUnknownFields+1)
	}
	if want := "tiers." + long[:40] + "...[0].z"; unknown[0].Field != want {
		t.Errorf("first path %.100q, want %q", unknown[0].Field, want)
	}
	if last, want := unknown[maxUnknownFields], fmt.Sprintf("unknown field, and %d more", 4000-maxUnknownFields-1); last.Reason != want {
		t.Errorf("last reason %q, want %q", last.Reason, want)
	}
	if n := len(err.Error()); n > 16<<10 {
		t.Errorf("error of %d bytes", n)
	}

	_, err = ParseRuleJSON([]byte(`{"id": "a", "key": ["ip"], "\u001b]0;t\u0007": 1}`))
	if fe := FieldErrors(err); len(fe) == 0 || fe[0].Field != `"\x1b]0;t\a"` {
		t.Errorf("field errors %q, want the unknown key quoted first", err)
	}
}
