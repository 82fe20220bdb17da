package accesslog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// src is where the test lines are read; its time is the fallback.
var src = Source{Topic: "nginx.access", Partition: 2, Offset: 41, Time: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}

// nginxLine is a line of deploy/gateways/nginx/access-log.conf's format
// (escape=json: every value a string).
const nginxLine = `{"time_iso8601":"2026-11-21T10:30:00+00:00","msec":"1795257000.123","remote_addr":"203.0.113.7",` +
	`"upstream_http_x_user_id":"u-42","request_method":"POST","request_uri":"/api//login?next=/home","status":"401",` +
	`"body_bytes_sent":"57","upstream_http_x_cost":"","http_user_agent":"curl/8.0"}`

func TestParse(t *testing.T) {
	want := event.Outcome{EventID: EventID(src), Instance: "nginx.access",
		TS: time.Unix(1795257000, 123_000_000).UTC(), IP: "203.0.113.7", UserID: "u-42",
		Endpoint: "/api/login", Method: "POST", Status: 401, Cost: 1}
	with := func(f func(*event.Outcome)) event.Outcome { o := want; f(&o); return o }
	for _, tc := range []struct {
		name    string
		mapping string // "" the default
		line    string
		want    event.Outcome
	}{
		{"nginx escape=json", "", nginxLine, want},
		{"numbers as numbers", "",
			`{"remote_addr":"203.0.113.7","request_uri":"/api/login","status":401,"msec":1795257000.123,` +
				`"upstream_http_x_user_id":"u-42","request_method":"post","upstream_http_x_cost":12}`,
			with(func(o *event.Outcome) { o.Cost = 12 })},
		{"absent values", "",
			`{"remote_addr":"203.0.113.7","request_uri":"/","status":"200","upstream_http_x_user_id":"-",` +
				`"request_method":"","upstream_http_x_cost":null}`,
			with(func(o *event.Outcome) {
				o.TS, o.UserID, o.Endpoint, o.Method, o.Status = src.Time, "", "/", "GET", 200
			})},
		{"cost from the cost field", "", strings.Replace(nginxLine, `"upstream_http_x_cost":""`, `"upstream_http_x_cost":"1500"`, 1),
			with(func(o *event.Outcome) { o.Cost = 1500 })},
		{"cost from bytes", "cost=bytes", nginxLine, with(func(o *event.Outcome) { o.Cost = 57 })},
		{"cost off", "cost=", strings.Replace(nginxLine, `"upstream_http_x_cost":""`, `"upstream_http_x_cost":"x"`, 1), want},
		{"zero cost", "", strings.Replace(nginxLine, `"upstream_http_x_cost":""`, `"upstream_http_x_cost":"0"`, 1),
			with(func(o *event.Outcome) { o.Cost = 0 })},
		{"time_iso8601", "time=time_iso8601", nginxLine,
			with(func(o *event.Outcome) { o.TS = time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC) })},
		{"time_local", "time=t", strings.Replace(nginxLine, `"msec"`, `"t":"21/Nov/2026:11:30:00 +0100","x"`, 1),
			with(func(o *event.Outcome) { o.TS = time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC) })},
		{"whole seconds", "", strings.Replace(nginxLine, `"1795257000.123"`, `"1795257000"`, 1),
			with(func(o *event.Outcome) { o.TS = time.Unix(1795257000, 0).UTC() })},
		{"unparsable time", "", strings.Replace(nginxLine, `"1795257000.123"`, `"soon"`, 1),
			with(func(o *event.Outcome) { o.TS = src.Time })},
		{"time of another type", "", strings.Replace(nginxLine, `"1795257000.123"`, `{}`, 1),
			with(func(o *event.Outcome) { o.TS = src.Time })},
		{"time past 9999", "", strings.Replace(nginxLine, `"1795257000.123"`, `"999999999999"`, 1),
			with(func(o *event.Outcome) { o.TS = src.Time })},
		{"time off", "time=", nginxLine, with(func(o *event.Outcome) { o.TS = src.Time })},
		{"IPv4-mapped IPv6", "", strings.Replace(nginxLine, `"203.0.113.7"`, `"::ffff:203.0.113.7"`, 1), want},
		{"IPv6 canonical", "", strings.Replace(nginxLine, `"203.0.113.7"`, `"2001:DB8:0::1"`, 1),
			with(func(o *event.Outcome) { o.IP = "2001:db8::1" })},
		{"endpoint normalized", "", strings.Replace(nginxLine, `/api//login?next=/home`, `/api/x/../%6Cogin;jsessionid=1`, 1), want},
		{"control character escaped", "", strings.Replace(nginxLine, `/api//login?next=/home`, `/x%00.php`, 1),
			with(func(o *event.Outcome) { o.Endpoint = "/x%00.php" })},
		{"tier mapped", "tier=tier", strings.Replace(nginxLine, `"status"`, `"tier":"VIP","status"`, 1),
			with(func(o *event.Outcome) { o.Tier = "VIP" })},
		{"status 499", "", strings.Replace(nginxLine, `"401"`, `"499"`, 1), with(func(o *event.Outcome) { o.Status = 499 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMapping(tc.mapping)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Parse([]byte(tc.line), src)
			if err != nil {
				t.Fatal(err)
			}
			if !got.TS.Equal(tc.want.TS) {
				t.Errorf("ts %v, want %v", got.TS, tc.want.TS)
			}
			got.TS = tc.want.TS
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(nginxLine, old) {
			t.Fatalf("%q not in the line", old)
		}
		return strings.Replace(nginxLine, old, new, 1)
	}
	for _, tc := range []struct {
		name, mapping, line string
		field, problem      string
	}{
		{"too long", "", `{"x":"` + strings.Repeat("a", MaxLine) + `"}`, "line", "longer than"},
		{"not JSON", "", `203.0.113.7 - - [21/Nov/2026] "GET / HTTP/1.1" 200`, "line", "not a JSON object"},
		{"a JSON array", "", `[1,2]`, "line", "not a JSON object"},
		{"null", "", `null`, "line", "not a JSON object"},
		{"truncated", "", nginxLine[:40], "line", "not a JSON object"},
		{"no ip", "", replace(`"remote_addr":"203.0.113.7",`, ""), "ip", `"remote_addr" is missing`},
		{"ip dash", "", replace(`"203.0.113.7"`, `"-"`), "ip", "missing"},
		{"unix socket", "", replace(`"203.0.113.7"`, `"unix:"`), "ip", `"unix:" is not an IP address`},
		{"ip list", "", replace(`"203.0.113.7"`, `"203.0.113.7, 10.0.0.1"`), "ip", "not an IP address"},
		{"no path", "", replace(`"request_uri":"/api//login?next=/home",`, ""), "path", "missing"},
		{"no status", "", replace(`"status":"401",`, ""), "status", "missing"},
		{"status too low", "", replace(`"401"`, `"0"`), "status", "not an HTTP status"},
		{"status too high", "", replace(`"401"`, `"600"`), "status", "not an HTTP status"},
		{"status not a number", "", replace(`"401"`, `"ok"`), "status", "not an HTTP status"},
		{"status a fraction", "", replace(`"401"`, `401.5`), "status", "not an HTTP status"},
		{"status an object", "", replace(`"401"`, `{"code":401}`), "status", "neither a string nor a number"},
		{"user a boolean", "", replace(`"u-42"`, `true`), "user", "neither a string nor a number"},
		{"negative cost", "", replace(`"upstream_http_x_cost":""`, `"upstream_http_x_cost":"-3"`), "cost", "not an integer"},
		{"cost not a number", "", replace(`"upstream_http_x_cost":""`, `"upstream_http_x_cost":"many"`), "cost", "not an integer"},
		{"bytes as cost, bad", "cost=bytes", replace(`"57"`, `"lots"`), "bytes", "not an integer"},
		{"method not a token", "", replace(`"POST"`, `"\u0016\u0003"`), "method", "out of bounds"},
		{"user too long", "", replace(`"u-42"`, `"`+strings.Repeat("u", event.MaxUserID+1)+`"`), "user", "out of bounds"},
		{"user with a control character", "", replace(`"u-42"`, `"u\n42"`), "user", "out of bounds"},
		{"endpoint too long", "", replace(`/api//login`, "/"+strings.Repeat("a", 3*event.MaxEndpoint)), "path", "out of bounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMapping(tc.mapping)
			if err != nil {
				t.Fatal(err)
			}
			o, err := m.Parse([]byte(tc.line), src)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %+v, %v; want an *Error", o, err)
			}
			if e.Field != tc.field || !strings.Contains(e.Problem, tc.problem) {
				t.Fatalf("error %q (field %q), want field %q and %q", err, e.Field, tc.field, tc.problem)
			}
		})
	}
}

func TestEventID(t *testing.T) {
	id := EventID(src)
	if len(id) != 36 || id[14] != '8' || !strings.ContainsRune("89ab", rune(id[19])) {
		t.Fatalf("EventID = %q, want a version-8 UUID", id)
	}
	if again := EventID(src); again != id {
		t.Fatalf("EventID not deterministic: %q then %q", id, again)
	}
	ids := map[string]bool{id: true}
	for _, other := range []Source{
		{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset + 1},
		{Topic: src.Topic, Partition: src.Partition + 1, Offset: src.Offset},
		{Topic: src.Topic + "2", Partition: src.Partition, Offset: src.Offset},
	} {
		if ids[EventID(other)] {
			t.Errorf("EventID(%+v) repeats another source's", other)
		}
		ids[EventID(other)] = true
	}
	if d := EventID(Source{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, Time: time.Now()}); d != id {
		t.Errorf("EventID depends on the message's time")
	}
}
