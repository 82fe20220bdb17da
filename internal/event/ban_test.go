package event

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleBan() Ban {
	ts := time.Date(2026, 11, 21, 10, 30, 0, 123456000, time.UTC)
	return Ban{
		BanID: "ban-1", TS: ts, Action: ActionBan, Scope: ScopeIP, Subject: "203.0.113.7", Reason: "scan",
		Count: 57, Threshold: 50, WindowS: 10, DurationS: 3600, ExpiresAt: ts.Add(time.Hour), Source: "detector",
		Evidence: Evidence{FirstTS: ts.Add(-10 * time.Second), LastTS: ts, SampleEndpoints: []string{"/a", "/b"}},
	}
}

func TestBanRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		ban  func(*Ban)
	}{
		{"ban", func(*Ban) {}},
		{"unban without expiry or evidence", func(b *Ban) {
			b.Action, b.ExpiresAt, b.Evidence = ActionUnban, time.Time{}, Evidence{SampleEndpoints: []string{}}
		}},
		{"user warn dry run", func(b *Ban) { b.Action, b.Scope, b.Subject, b.DryRun = ActionWarn, ScopeUser, "u-42", true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sampleBan()
			tc.ban(&in)
			enc, err := EncodeBan(in)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(enc, &m); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"ban_id", "ts", "action", "scope", "subject", "reason", "count", "threshold",
				"window_s", "duration_s", "expires_at", "source", "dry_run", "evidence"} {
				if _, ok := m[f]; !ok {
					t.Errorf("field %q missing in %s", f, enc)
				}
			}
			out, err := DecodeBan(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(out, in) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
			}
		})
	}
}

func TestBanKey(t *testing.T) {
	b := sampleBan()
	if got := b.Key(); got != "ip:203.0.113.7" {
		t.Fatalf("Key() = %q", got)
	}
}

func TestBanValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Ban)
		wantErr string
	}{
		{"bad action", func(b *Ban) { b.Action = "kill" }, `"action"`},
		{"bad scope", func(b *Ban) { b.Scope = "asn" }, `"scope"`},
		{"no subject", func(b *Ban) { b.Subject = "" }, `"subject"`},
		{"no ban id", func(b *Ban) { b.BanID = "" }, `"ban_id"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sampleBan()
			tc.mutate(&b)
			if _, err := EncodeBan(b); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("EncodeBan error %v, want %s", err, tc.wantErr)
			}
			good, _ := EncodeBan(sampleBan())
			var m map[string]any
			_ = json.Unmarshal(good, &m)
			switch tc.wantErr {
			case `"action"`:
				m["action"] = b.Action
			case `"scope"`:
				m["scope"] = b.Scope
			case `"subject"`:
				m["subject"] = ""
			case `"ban_id"`:
				delete(m, "ban_id")
			}
			raw, _ := json.Marshal(m)
			if _, err := DecodeBan(raw); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("DecodeBan error %v, want %s", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeBanBadTime(t *testing.T) {
	good, _ := EncodeBan(sampleBan())
	bad := strings.Replace(string(good), `"expires_at":"2026-11-21T11:30:00.123456Z"`, `"expires_at":"soon"`, 1)
	if _, err := DecodeBan([]byte(bad)); err == nil || !strings.Contains(err.Error(), "expires_at") {
		t.Fatalf("error %v, want one naming expires_at", err)
	}
}
