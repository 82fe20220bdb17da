package event

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleOutcome() Outcome {
	return Outcome{
		EventID: "0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c02", TS: time.Date(2026, 11, 21, 10, 30, 0, 123456000, time.UTC),
		Instance: "limiter-1", UserID: "alice", IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST",
		Tier: "BASIC", Status: 401, Cost: 1, Banned: true, UserBanned: true,
	}
}

// An outcome of a limiter that predates user_banned decodes with it false.
func TestDecodeOutcomeWithoutUserBanned(t *testing.T) {
	o := sampleOutcome()
	enc := strings.Replace(string(o.AppendJSON(nil)), `,"user_banned":true`, "", 1)
	got, err := DecodeOutcome([]byte(enc))
	if err != nil || got.UserBanned || !got.Banned {
		t.Fatalf("decoded %+v (%v) from %s, want banned and not user_banned", got, err, enc)
	}
}

func TestOutcomeRoundTrip(t *testing.T) {
	o := sampleOutcome()
	o.UserID = "<\"\u2028\">"
	enc := o.AppendJSON(nil)
	got, err := DecodeOutcome(enc)
	if err != nil {
		t.Fatalf("%v: %s", err, enc)
	}
	if !reflect.DeepEqual(got, o) {
		t.Fatalf("decoded %+v, want %+v", got, o)
	}
}

// The schema declares exactly the fields the encoder writes, all required
// but hold, which only reports naming a hold carry, and accepts what the
// encoder writes.
func TestSchemaOutcomeFieldsMatchEncoder(t *testing.T) {
	const path = "../../deploy/schemas/outcome.schema.json"
	o := sampleOutcome()
	enc := o.AppendJSON(nil)
	got := keysOf(t, enc)
	o.Hold = "q1Vn2oXkT0aBw3-_9zYxLg"
	withHold := o.AppendJSON(nil)
	all := keysOf(t, withHold)
	props, required := schemaFields(t, path)
	if !slices.Equal(props, all) || !slices.Equal(required, got) {
		t.Fatalf("encoder writes %v, with a hold %v\nschema properties %v\nschema required %v", got, all, props, required)
	}
	s := compileSchema(t, path)
	for _, msg := range [][]byte{enc, withHold} {
		if err := s.Validate(msg); err != nil {
			t.Fatalf("schema rejects %s: %v", msg, err)
		}
	}
	if got, err := DecodeOutcome(withHold); err != nil || got.Hold != o.Hold {
		t.Fatalf("decoded hold %q (%v) from %s", got.Hold, err, withHold)
	}
	checkRejects(t, s, []rejectCase{
		{"status below 100", []byte(strings.Replace(string(enc), `"status":401`, `"status":99`, 1)), "minimum"},
		{"negative cost", []byte(strings.Replace(string(enc), `"cost":1`, `"cost":-1`, 1)), "minimum"},
		{"malformed hold", []byte(strings.Replace(string(withHold), o.Hold, "not-a-hold", 1)), "/hold"},
	})
}

func TestDecodeOutcomeRejects(t *testing.T) {
	o := sampleOutcome()
	base := string(o.AppendJSON(nil))
	for _, tc := range []struct {
		name, msg, field string
	}{
		{"no status", strings.Replace(base, `,"status":401`, "", 1), ""},
		{"status 600", strings.Replace(base, `"status":401`, `"status":600`, 1), "status"},
		{"status 0", strings.Replace(base, `"status":401`, `"status":0`, 1), "status"},
		{"negative cost", strings.Replace(base, `"cost":1`, `"cost":-5`, 1), "cost"},
		{"bad ip", strings.Replace(base, `"203.0.113.7"`, `"host"`, 1), "ip"},
		{"no endpoint", strings.Replace(base, `"endpoint":"/api/login"`, `"endpoint":""`, 1), ""},
		{"control in user", strings.Replace(base, `"user_id":"alice"`, `"user_id":"a\u0000"`, 1), "user_id"},
		{"not json", "{", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeOutcome([]byte(tc.msg))
			if err == nil {
				t.Fatalf("accepted %s", tc.msg)
			}
			var fe *FieldError
			if tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
				t.Fatalf("error %v, want a FieldError on %s", err, tc.field)
			}
			if fe != nil && !slices.Contains(InvalidOutcomeFields(), fe.Field) {
				t.Fatalf("field %s is not in InvalidOutcomeFields", fe.Field)
			}
		})
	}
}

func FuzzDecodeOutcome(f *testing.F) {
	o := sampleOutcome()
	f.Add(o.AppendJSON(nil))
	f.Add([]byte(`{"event_id":"e","ts":"2026-01-01T00:00:00Z","ip":"::1","endpoint":"/","status":404}`))
	f.Add([]byte(`{"status":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeOutcome(data)
		if err != nil {
			return
		}
		enc := got.AppendJSON(nil)
		if !json.Valid(enc) {
			t.Fatalf("re-encoding is not valid JSON: %s", enc)
		}
		if _, err := DecodeOutcome(enc); err != nil && got.TS.Year() >= 0 && got.TS.Year() <= 9999 {
			t.Fatalf("re-encoding does not decode: %v: %s", err, enc)
		}
	})
}
