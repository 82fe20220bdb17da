package event

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Each kind of decision the limiter never publishes is refused by the
// decoder, naming the field at fault; values at the bounds pass.
func TestDecodeDecisionBounds(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(*Decision)
		wantField string // "" when valid
	}{
		{"sample", func(*Decision) {}, ""},
		{"longest endpoint an event carries", func(d *Decision) { d.Endpoint = "/" + strings.Repeat("e", MaxEndpoint) }, ""},
		{"1 MiB endpoint", func(d *Decision) { d.Endpoint = "/" + strings.Repeat("e", 1<<20) }, "endpoint"},
		{"endpoint with a control character", func(d *Decision) { d.Endpoint = "/a\x00b" }, "endpoint"},
		{"endpoint with DEL", func(d *Decision) { d.Endpoint = "/a\x7f" }, "endpoint"},
		{"longest user_id", func(d *Decision) { d.UserID = strings.Repeat("é", MaxUserID/2) }, ""},
		{"user_id too long", func(d *Decision) { d.UserID = strings.Repeat("u", MaxUserID+1) }, "user_id"},
		{"user_id with a newline", func(d *Decision) { d.UserID = "u\n42" }, "user_id"},
		{"tier too long", func(d *Decision) { d.Tier = strings.Repeat("t", MaxTier+1) }, "tier"},
		{"ts zero (0001-01-01)", func(d *Decision) { d.TS = time.Time{} }, "ts"},
		{"ts before the epoch", func(d *Decision) { d.TS = time.Unix(0, 0).Add(-time.Microsecond) }, "ts"},
		{"ts at the epoch", func(d *Decision) { d.TS = time.Unix(0, 0) }, ""},
		{"ts in year 9999", func(d *Decision) { d.TS = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) }, ""},
		{"ip not an IP", func(d *Decision) { d.IP = "not-an-ip" }, "ip"},
		{"ip with a zone", func(d *Decision) { d.IP = "fe80::1%" + strings.Repeat("z", 1000) }, "ip"},
		{"ipv6", func(d *Decision) { d.IP = "2001:db8::1" }, ""},
		{"event_id too long", func(d *Decision) { d.EventID = strings.Repeat("e", MaxEventID+1) }, "event_id"},
		{"method not a token", func(d *Decision) { d.Method = "GET /" }, "method"},
		{"method too long", func(d *Decision) { d.Method = strings.Repeat("M", MaxMethod+1) }, "method"},
		{"method empty", func(d *Decision) { d.Method = "" }, ""},
		{"instance too long", func(d *Decision) { d.Instance = strings.Repeat("i", MaxName+1) }, "instance"},
		{"rule_id too long", func(d *Decision) { d.RuleID = strings.Repeat("r", MaxName+1) }, "rule_id"},
		{"algorithm too long", func(d *Decision) { d.Algorithm = strings.Repeat("a", MaxName+1) }, "algorithm"},
		{"mode too long", func(d *Decision) { d.Mode = strings.Repeat("m", MaxName+1) }, "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleDecision()
			tt.edit(&d)
			got, err := DecodeDecision(d.AppendJSON(nil))
			var fe *FieldError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantField == "" && got.Endpoint != d.Endpoint:
				t.Fatalf("endpoint changed: %d bytes, want %d", len(got.Endpoint), len(d.Endpoint))
			case tt.wantField != "" && !errors.As(err, &fe):
				t.Fatalf("error %v, want a *FieldError on %q", err, tt.wantField)
			case tt.wantField != "" && fe.Field != tt.wantField:
				t.Fatalf("field %q (%v), want %q", fe.Field, err, tt.wantField)
			case tt.wantField != "" && !slices.Contains(InvalidFields(), fe.Field):
				t.Fatalf("field %q is not listed by InvalidFields", fe.Field)
			}
		})
	}
}

// A Decision built in memory (not decoded) is checked for UTF-8 too:
// decoding JSON always yields valid UTF-8, so only Validate sees these.
func TestValidateInvalidUTF8(t *testing.T) {
	for _, field := range []string{"event_id", "endpoint", "user_id", "tier", "instance"} {
		d := sampleDecision()
		bad := "/\xff"
		switch field {
		case "event_id":
			d.EventID = bad
		case "endpoint":
			d.Endpoint = bad
		case "user_id":
			d.UserID = bad
		case "tier":
			d.Tier = bad
		case "instance":
			d.Instance = bad
		}
		var fe *FieldError
		if err := d.Validate(); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s invalid UTF-8: %v", field, err)
		}
	}
}

func TestValidMethod(t *testing.T) {
	for m, want := range map[string]bool{
		"GET": true, "get": true, "M-SEARCH": true, "X_Y": true, strings.Repeat("A", MaxMethod): true,
		"": false, strings.Repeat("A", MaxMethod+1): false, "GET ": false, "G1": false, "PÖST": false,
	} {
		if got := ValidMethod(m); got != want {
			t.Errorf("ValidMethod(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestEscapeEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/api/login", "/api/login"},
		{"/é/ü", "/é/ü"},
		{"/a\x00", "/a%00"},
		{"/a\nb\x7f", "/a%0Ab%7F"},
		{"/a\xff\xfe", "/a%FF%FE"},
		{"/é\xc3", "/é%C3"}, // a cut-off sequence
	} {
		if got := EscapeEndpoint(tc.in); got != tc.want {
			t.Errorf("EscapeEndpoint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Whatever a path decodes to, its escaped form is an endpoint a valid event
// carries, and distinct paths stay distinct.
func FuzzEscapeEndpoint(f *testing.F) {
	for _, s := range []string{"/a\x00", "/\xff", "/é", "/a%00"} {
		f.Add(s, "/b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea := EscapeEndpoint(a)
		if !utf8.ValidString(ea) || HasControl(ea) || len(ea) > 3*len(a) {
			t.Fatalf("EscapeEndpoint(%q) = %q: not valid UTF-8 without control characters of at most 3× the length", a, ea)
		}
		if a != b && ea == EscapeEndpoint(b) && !strings.Contains(a+b, "%") {
			t.Fatalf("%q and %q escape alike: %q", a, b, ea)
		}
	})
}
