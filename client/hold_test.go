package client

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// holdID is a hold as the limiter answers one.
const holdID = "q1Vn2oXkT0aBw3-_9zYxLg"

// strictHold is the limiter's own test of a hold id (decide.ValidHoldID):
// 22 characters that strict base64url decoding reads as 16 bytes.
func strictHold(id string) bool {
	if len(id) != holdLen {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(id)
	return err == nil && len(b) == 16
}

func TestValidHold(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{holdID, true},
		{"AAAAAAAAAAAAAAAAAAAAAA", true},
		{"__________________-_-w", true},
		{"", false},
		{holdID[:21], false},
		{holdID + "A", false},
		{"q1Vn2oXkT0aBw3-_9zYxLh", false}, // the unused bits set
		{"q1Vn2oXkT0aBw3+/9zYxLg", false}, // base64, not base64url
		{"q1Vn2oXkT0aBw3-_9zYx==", false},
		{"q1Vn2oXkT0aBw3-_9zYxL\x00", false},
		{"q1Vn2oXkT0aBw3-_9zYxLé", false},
	} {
		if got := validHold(tc.id); got != tc.want || got != strictHold(tc.id) {
			t.Errorf("validHold(%q) = %v, want %v (strict base64url: %v)", tc.id, got, tc.want, strictHold(tc.id))
		}
	}
}

// validHold accepts exactly what the limiter accepts.
func FuzzValidHold(f *testing.F) {
	for _, s := range []string{holdID, "q1Vn2oXkT0aBw3-_9zYxLh", "AAAAAAAAAAAAAAAAAAAAAA", "", "q1Vn2oXkT0aBw3+/9zYxLg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if validHold(id) != strictHold(id) {
			t.Fatalf("validHold(%q) = %v, the limiter's test %v", id, validHold(id), strictHold(id))
		}
	})
}

// A check's hold is read from its answer, in a batch too; an answer with a
// malformed hold is not the limiter's (the failure policy decides).
func TestCheckReadsTheHold(t *testing.T) {
	ctx := context.Background()
	req := Request{IP: "203.0.113.7", Endpoint: "/api/exports"}
	held := strings.TrimSuffix(allowedAnswer, "}") + `,"hold":"` + holdID + `"}`
	c := newClient(t, Config{URL: newFake(t, answer(200, "application/json", held)).URL, OnFailure: FailClosed})
	if d, err := c.Check(ctx, &req); err != nil || d.Hold != holdID {
		t.Fatalf("check: hold %q, %v; want %s", d.Hold, err, holdID)
	}
	entry := func(answer string) string { return `{"status":200,` + answer[1:] }
	batch := `{"decisions":[` + entry(held) + `,` + entry(allowedAnswer) + `]}`
	c = newClient(t, Config{URL: newFake(t, answer(200, "application/json", batch)).URL, OnFailure: FailClosed})
	if ds, err := c.CheckBatch(ctx, []Request{req, req}); err != nil || ds[0].Hold != holdID || ds[1].Hold != "" {
		t.Fatalf("batch: %+v, %v", ds, err)
	}
	bad := strings.TrimSuffix(allowedAnswer, "}") + `,"hold":"not-a-hold"}`
	c = newClient(t, Config{URL: newFake(t, answer(200, "application/json", bad)).URL, OnFailure: FailClosed})
	d, err := c.Check(ctx, &req)
	if e := (*Error)(nil); !errors.As(err, &e) || !strings.Contains(e.Message, "hold: not a hold id") || d.Allowed || !d.Fallback || d.Hold != "" {
		t.Fatalf("a malformed hold: %+v, %v; want the failure policy's refusal", d, err)
	}
}

// A report carries its hold; the answer says which rule released it. A
// malformed hold is refused before any call, by Report, ReportBatch and
// ReportAsync, which counts the hold lost.
func TestReportReleasesTheHold(t *testing.T) {
	ctx := context.Background()
	f := newFake(t, answer(200, "application/json", `{"event_id":"e","mode":"redis","rules":[{"rule_id":"exports","limit":5,`+
		`"remaining":5,"reset_after_ms":0,"spent":false,"released":true}]}`))
	var log errorLog
	c := newClient(t, Config{URL: f.URL, OnError: log.hook})
	o := Outcome{IP: "203.0.113.7", Endpoint: "/api/exports", Status: 200, Cost: CostNone, Hold: holdID}
	r, err := c.Report(ctx, &o)
	if err != nil || len(r.Rules) != 1 || !r.Rules[0].Released {
		t.Fatalf("report: %+v, %v", r, err)
	}
	if sent := f.sent("/v1/report"); len(sent) != 1 || sent[0] != `{"ip":"203.0.113.7","endpoint":"/api/exports","status":200,"cost":0,"hold":"`+holdID+`"}` {
		t.Fatalf("sent %q", sent)
	}
	bad := o
	bad.Hold = holdID[:21]
	if _, err := c.Report(ctx, &bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hold: not a hold id") {
		t.Fatalf("a malformed hold: %v", err)
	}
	if _, err := c.ReportBatch(ctx, []Outcome{o, bad}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "outcome 1: hold: not a hold id") {
		t.Fatalf("a batch with a malformed hold: %v", err)
	}
	if c.ReportAsync(&bad) {
		t.Fatal("ReportAsync queued a malformed hold")
	}
	if len(f.sent("/v1/report")) != 1 || len(f.sent("/v1/report/batch")) != 0 {
		t.Fatal("a malformed hold was sent")
	}
	if s := c.Stats(); s.ReportsInvalid != 1 || s.HoldsLost != 1 || s.HoldsSent != 0 {
		t.Fatalf("stats %+v", s)
	}
	if got := log.all(); len(got) != 3 {
		t.Fatalf("OnError saw %q, want the 3 refusals", got)
	}
}

// The releases of ReportAsync are counted: sent, or lost with a failed
// call, or dropped once the client is closed.
func TestReleasesCounted(t *testing.T) {
	ok := `{"reports":[{"event_id":"e","mode":"redis","rules":[]},{"event_id":"f","mode":"redis","rules":[]}]}`
	for _, tc := range []struct {
		name       string
		serve      func(http.ResponseWriter, *http.Request, string)
		sent, lost uint64
	}{
		{"sent", answer(200, "application/json", ok), 1, 0},
		{"failed", answer(502, "text/html", "bad gateway"), 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{URL: newFake(t, tc.serve).URL})
			if err != nil {
				t.Fatal(err)
			}
			with := Outcome{IP: "203.0.113.7", Endpoint: "/api/exports", Status: 200, Hold: holdID}
			without := Outcome{IP: "203.0.113.7", Endpoint: "/api/exports", Status: 200}
			for _, o := range []*Outcome{&with, &without} {
				for !c.ReportAsync(o) {
				}
			}
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if c.ReportAsync(&with) {
				t.Fatal("queued after Close")
			}
			if s := c.Stats(); s.HoldsSent != tc.sent || s.HoldsLost != tc.lost+1 {
				t.Fatalf("stats %+v, want %d holds sent, %d lost", s, tc.sent, tc.lost+1)
			}
		})
	}
}

// The middleware releases the hold of a request whose report ReportIf
// declines, in a report without status (a release only); with the
// report, in the report. A panicking handler's is released (status 500), and the panic
// goes on.
func TestMiddlewareReleases(t *testing.T) {
	held := strings.TrimSuffix(allowedAnswer, "}") + `,"hold":"` + holdID + `"}`
	serve := func(w http.ResponseWriter, r *http.Request, body string) {
		if r.URL.Path == "/v1/check" {
			answer(200, "application/json", held)(w, r, body)
			return
		}
		n := strings.Count(body, `"endpoint":`)
		answer(200, "application/json", `{"reports":[`+strings.TrimSuffix(strings.Repeat(`{"event_id":"x","mode":"redis","rules":[]},`, n), ",")+`]}`)(w, r, body)
	}
	for _, tc := range []struct {
		name   string
		cfg    MiddlewareConfig
		panics bool
		want   string
	}{
		{"reported", MiddlewareConfig{ReportCost: func(*http.Request, int, http.Header) int64 { return 7 }}, false,
			`"status":418,"cost":7,"hold":"` + holdID + `"}`},
		{"NeverReport", MiddlewareConfig{ReportIf: NeverReport, ReportCost: func(*http.Request, int, http.Header) int64 { return 7 }}, false,
			`"method":"GET","hold":"` + holdID + `"}`},
		{"panic", MiddlewareConfig{}, true, `"status":500,"hold":"` + holdID + `"}`},
		{"panic, NeverReport", MiddlewareConfig{ReportIf: NeverReport}, true, `"method":"GET","hold":"` + holdID + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, serve)
			c, err := New(Config{URL: f.URL})
			if err != nil {
				t.Fatal(err)
			}
			h := Middleware(c, tc.cfg)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.panics {
					panic(http.ErrAbortHandler)
				}
				w.WriteHeader(http.StatusTeapot)
			}))
			r := httptest.NewRequest(http.MethodGet, "http://app/api/exports", nil)
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.panics {
						t.Fatalf("recovered %v", p)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), r)
			}()
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.HoldsSent != 1 {
				t.Fatalf("stats %+v, want 1 hold sent", s)
			}
			var found bool
			for _, b := range f.sent("/v1/report/batch") {
				found = found || strings.Contains(b, tc.want)
			}
			if !found {
				t.Fatalf("no report ends %s: %q", tc.want, f.sent("/v1/report/batch"))
			}
		})
	}
}
