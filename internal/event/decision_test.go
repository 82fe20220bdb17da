package event

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleDecision() Decision {
	return Decision{
		EventID: "0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c01", TS: time.Date(2026, 11, 21, 10, 30, 0, 123456789, time.UTC),
		Instance: "limiter-1", UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/books/17", Method: "GET",
		Tier: "BASIC", RuleID: "login-per-ip", Algorithm: "sliding_window", Allowed: false, Reason: ReasonRateLimited,
		Limit: 5, Remaining: 0, RetryAfterMS: 740, Mode: "redis", Shadow: false,
	}
}

func TestAppendJSONContractExample(t *testing.T) {
	d := sampleDecision()
	got := string(d.AppendJSON(nil))
	want := `{"event_id":"0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c01","ts":"2026-11-21T10:30:00.123456Z","instance":"limiter-1",` +
		`"user_id":"u-42","ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET","tier":"BASIC",` +
		`"rule_id":"login-per-ip","algorithm":"sliding_window","allowed":false,"reason":"rate_limited",` +
		`"limit":5,"remaining":0,"retry_after_ms":740,"mode":"redis","shadow":false}`
	if got != want {
		t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
	}
}

func TestAppendJSONAllFieldsPresent(t *testing.T) {
	var d Decision
	var m map[string]any
	if err := json.Unmarshal(d.AppendJSON(nil), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"event_id", "ts", "instance", "user_id", "ip", "endpoint", "method", "tier", "rule_id",
		"algorithm", "allowed", "reason", "limit", "remaining", "retry_after_ms", "mode", "shadow"} {
		if _, ok := m[f]; !ok {
			t.Errorf("field %q missing", f)
		}
	}
	if len(m) != 17 {
		t.Errorf("got %d fields, want 17", len(m))
	}
}

func TestAppendJSONTimestamp(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   time.Time
		want string
	}{
		{"utc micro", time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), "2026-01-02T03:04:05.000006Z"},
		{"offset converted to utc", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), "2026-01-02T02:04:05.000000Z"},
		{"zero", time.Time{}, "0001-01-01T00:00:00.000000Z"},
		{"nanos truncated", time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.UTC), "2026-01-02T03:04:05.999999Z"},
		{"year beyond 9999", time.Date(12026, 1, 2, 3, 4, 5, 0, time.UTC), "12026-01-02T03:04:05.000000Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(appendTime(nil, tc.ts)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDecodeDecision(t *testing.T) {
	valid := sampleDecision()
	good := string(valid.AppendJSON(nil))
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
	}{
		{"valid", good, ""},
		{"unknown field tolerated", strings.Replace(good, `{`, `{"future":{"x":[1,2]},`, 1), ""},
		{"missing event_id", strings.Replace(good, `"event_id":"0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c01"`, `"event_id":""`, 1), `"event_id"`},
		{"missing ts", strings.Replace(good, `"ts":"2026-11-21T10:30:00.123456Z",`, ``, 1), `"ts"`},
		{"bad ts", strings.Replace(good, `2026-11-21T10:30:00.123456Z`, `yesterday`, 1), `"ts"`},
		{"missing ip", strings.Replace(good, `"ip":"203.0.113.7",`, ``, 1), `"ip"`},
		{"missing endpoint", strings.Replace(good, `"endpoint":"/api/books/17"`, `"endpoint":""`, 1), `"endpoint"`},
		{"missing reason", strings.Replace(good, `"reason":"rate_limited",`, ``, 1), `"reason"`},
		{"unknown reason", strings.Replace(good, `"rate_limited"`, `"maybe"`, 1), `"reason"`},
		{"wrong type", strings.Replace(good, `"limit":5`, `"limit":"5"`, 1), `limit`},
		{"not json", `{`, `decode decision`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeDecision([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				want := valid
				want.TS = want.TS.Truncate(time.Microsecond)
				if !reflect.DeepEqual(d, want) {
					t.Fatalf("got %+v, want %+v", d, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %s", err, tc.wantErr)
			}
		})
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	d := sampleDecision()
	d.Endpoint = `/api/search?q="quoted"&x=<y>`
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = d.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

func TestAppendJSONDoesNotAllocate(t *testing.T) {
	d := sampleDecision()
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = d.AppendJSON(buf[:0]) }); n != 0 {
		t.Fatalf("AppendJSON allocates %v times per call with a reused buffer", n)
	}
}
