package event

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

func FuzzDecodeDecision(f *testing.F) {
	d := sampleDecision()
	f.Add(d.AppendJSON(nil))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"event_id":"e","ts":"2026-01-01T00:00:00Z","ip":"1.2.3.4","endpoint":"/","reason":"ok","x":null}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte("\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeDecision(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to valid JSON that decodes the same.
		enc := got.AppendJSON(nil)
		if !json.Valid(enc) {
			t.Fatalf("re-encoding is not valid JSON: %s", enc)
		}
		if _, err := DecodeDecision(enc); err != nil && got.TS.Year() >= 0 && got.TS.Year() <= 9999 {
			t.Fatalf("re-encoding does not decode: %v: %s", err, enc)
		}
	})
}

func FuzzDecisionRoundTrip(f *testing.F) {
	f.Add("e-1", int64(1_790_000_000_123_456), "inst", "u-42", "203.0.113.7", "/api/books/17", "GET", "BASIC",
		"rule", "sliding_window", true, uint8(1), int64(5), int64(0), int64(740), "redis", false)
	f.Add("\"\\\x00", int64(0), "<>&", "\u2028", "\xff\xfe", "/\t\n", "", "", "", "", false, uint8(0), int64(-1), int64(1<<62), int64(-1<<63), "", true)
	reasons := []string{ReasonOK, ReasonRateLimited, ReasonBanned, ReasonExempt, ReasonNoRule}
	f.Fuzz(func(t *testing.T, eventID string, micros int64, instance, userID, ip, endpoint, method, tier, ruleID, algorithm string,
		allowed bool, reason uint8, limit, remaining, retryAfter int64, mode string, shadow bool) {
		// Keep ts within RFC 3339's four-digit years.
		const maxMicros = 253402300799999999 // 9999-12-31T23:59:59.999999Z
		micros %= maxMicros
		if micros < 0 {
			micros = -micros
		}
		micros -= 62135596800000000 // shift into year 1..9999
		if micros < -62135596800000000 {
			micros = -62135596800000000
		}
		d := Decision{
			EventID: eventID, TS: time.UnixMicro(micros).UTC(), Instance: instance, UserID: userID, IP: ip,
			Endpoint: endpoint, Method: method, Tier: tier, RuleID: ruleID, Algorithm: algorithm, Allowed: allowed,
			Reason: reasons[int(reason)%len(reasons)], Limit: limit, Remaining: remaining, RetryAfterMS: retryAfter,
			Mode: mode, Shadow: shadow,
		}
		enc := d.AppendJSON(nil)
		if !json.Valid(enc) {
			t.Fatalf("not valid JSON: %q", enc)
		}
		var viaStd map[string]any
		if err := json.Unmarshal(enc, &viaStd); err != nil {
			t.Fatalf("encoding/json rejects it: %v", err)
		}
		got, err := DecodeDecision(enc)
		if d.EventID == "" || d.IP == "" || d.Endpoint == "" {
			if err == nil {
				t.Fatalf("decoded a decision without a required field: %s", enc)
			}
			return
		}
		// What the decoder sees: the strings as JSON carries them.
		sent := d
		for _, s := range []*string{&sent.EventID, &sent.Instance, &sent.UserID, &sent.IP, &sent.Endpoint, &sent.Method,
			&sent.Tier, &sent.RuleID, &sent.Algorithm, &sent.Mode} {
			*s = viaJSON(t, *s)
		}
		if verr := sent.Validate(); verr != nil {
			var fe, want *FieldError
			if !errors.As(err, &fe) || !errors.As(verr, &want) || fe.Field != want.Field {
				t.Fatalf("DecodeDecision(%s) = %v, want the error %v", enc, err, verr)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeDecision(%s): %v", enc, err)
		}
		if !got.TS.Equal(d.TS) {
			t.Fatalf("ts: got %v, want %v", got.TS, d.TS)
		}
		got.TS = d.TS
		allValid := true
		for _, s := range []string{eventID, instance, userID, ip, endpoint, method, tier, ruleID, algorithm, mode} {
			allValid = allValid && utf8.ValidString(s)
		}
		if allValid && !reflect.DeepEqual(got, d) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, d)
		}
	})
}

// viaJSON returns s as a JSON string carries it: invalid UTF-8 replaced.
func viaJSON(t *testing.T, s string) string {
	t.Helper()
	var out string
	if err := json.Unmarshal(jsonwire.AppendString(nil, s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func FuzzDecodeBan(f *testing.F) {
	enc, err := EncodeBan(sampleBan())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(`{"ban_id":"b","ts":"2026-01-01T00:00:00Z","action":"warn","scope":"user","subject":"u","expires_at":null,"evidence":null}`))
	f.Add([]byte(`{"evidence":{"sample_endpoints":[1]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBan(data)
		if err != nil {
			return
		}
		out, err := EncodeBan(b)
		if err != nil {
			t.Fatalf("a decoded ban does not encode: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("not valid JSON: %s", out)
		}
	})
}
