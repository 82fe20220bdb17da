package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// maskedKeys are the JSON keys whose values differ from one run to the
// next (ids, times, time left, hashes of files that change): a sample's
// value and the answer's are compared by kind only (null, false/true, zero
// or another number, empty or another string), so a sample still may not
// show a retry time on an allowed decision.
var maskedKeys = []string{
	"event_id", "ban_id", "ts", "expires_at", "applied_at", "changed_at", "updated_at", "last_seen",
	"refused_at", "first_ts", "last_ts", "reset_after_ms", "retry_after_ms", "durationUntilReset",
	"file_hash", "version",
}

// ignoredHeaders are left out of a curl -i answer before comparing: they
// say nothing about the API.
var ignoredHeaders = []string{"Date", "Content-Length"}

// maskedHeaders rewrite the values of headers that count time left.
var maskedHeaders = map[string]*regexp.Regexp{
	"Ratelimit":         regexp.MustCompile(`t=\d+`),
	"X-Ratelimit-Reset": regexp.MustCompile(`^\d+$`),
	"Retry-After":       regexp.MustCompile(`^\d+$`),
}

var digits = regexp.MustCompile(`\d+`)

// ellipsis in a sample stands for what it does not show: any value; as the
// last element of an array, any further elements; as a key, any further
// keys; as the last line of a text answer, any further lines.
const ellipsis = "..."

// sampleAnswer is what a sample's command got.
type sampleAnswer struct {
	status string // "HTTP/1.1 200 OK"; empty for a command's output
	code   int    // the status code; 0 for a command's output
	header http.Header
	body   []byte
}

// compareAnswer lists how got differs from the sample's answer text want.
func compareAnswer(want string, got sampleAnswer, include bool, mask []string) []string {
	var diffs []string
	wantBody := want
	if include {
		head, body, _ := strings.Cut(want, "\n\n")
		wantBody = body
		hl := strings.Split(head, "\n")
		if hl[0] != got.status {
			diffs = append(diffs, fmt.Sprintf("status line %q; the sample shows %q", got.status, hl[0]))
		}
		diffs = append(diffs, compareHeaders(hl[1:], got.header)...)
	} else if strings.HasPrefix(want, "HTTP/") {
		return []string{"the sample shows a status line and headers: its command needs curl -i"}
	} else if got.code != 0 && got.code/100 != 2 {
		diffs = append(diffs, fmt.Sprintf("%s: a sample without a status line must answer 2xx (show it with curl -i)", got.status))
	}
	var wantJSON, gotJSON any
	if err := decodeJSON([]byte(wantBody), &wantJSON); err == nil {
		if err := decodeJSON(got.body, &gotJSON); err != nil {
			return append(diffs, fmt.Sprintf("the answer is not JSON (%v) where the sample shows JSON", err))
		}
		masked := append(slices.Clone(maskedKeys), mask...)
		return append(diffs, compareJSON("", "", wantJSON, gotJSON, masked)...)
	}
	return append(diffs, compareText(wantBody, string(got.body))...)
}

func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// compareHeaders compares the headers a sample shows with those of the
// answer, ignoredHeaders left out: the same names, the same values once
// masked, in any order.
func compareHeaders(want []string, got http.Header) []string {
	norm := func(name, value string) string {
		name = http.CanonicalHeaderKey(strings.TrimSpace(name))
		value = strings.TrimSpace(value)
		if re, ok := maskedHeaders[name]; ok {
			value = re.ReplaceAllStringFunc(value, func(s string) string { return digits.ReplaceAllString(s, "N") })
		}
		return name + ": " + value
	}
	var w, g []string
	for _, l := range want {
		name, value, _ := strings.Cut(l, ":")
		w = append(w, norm(name, value))
	}
	for name, values := range got {
		if slices.Contains(ignoredHeaders, http.CanonicalHeaderKey(name)) {
			continue
		}
		for _, v := range values {
			g = append(g, norm(name, v))
		}
	}
	slices.Sort(w)
	slices.Sort(g)
	var diffs []string
	for _, h := range w {
		if !slices.Contains(g, h) {
			diffs = append(diffs, "header not in the answer: "+h)
		}
	}
	for _, h := range g {
		if !slices.Contains(w, h) {
			diffs = append(diffs, "header not in the sample: "+h)
		}
	}
	return diffs
}

// compareJSON compares the sample's value want at path (under key) with
// the answer's got.
func compareJSON(path, key string, want, got any, masked []string) []string {
	if want == ellipsis {
		return nil
	}
	if slices.Contains(masked, key) {
		if kind(want) != kind(got) {
			return []string{fmt.Sprintf("%s: %v (%s); the sample shows %v (%s)", path, got, kind(got), want, kind(want))}
		}
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v; the sample shows an object", path, got)}
		}
		var diffs []string
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		_, more := w[ellipsis]
		for _, k := range keys {
			wv, inWant := w[k]
			gv, inGot := g[k]
			switch {
			case k == ellipsis:
			case !inGot:
				diffs = append(diffs, fmt.Sprintf("%s.%s: not in the answer", path, k))
			case !inWant && !more:
				diffs = append(diffs, fmt.Sprintf("%s.%s: %v is not in the sample", path, k, compact(gv)))
			case inWant:
				diffs = append(diffs, compareJSON(path+"."+k, k, wv, gv, masked)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v; the sample shows an array", path, compact(got))}
		}
		n := len(w)
		open := n > 0 && w[n-1] == ellipsis
		if open {
			n--
		}
		if len(g) < n || (!open && len(g) != n) {
			return []string{fmt.Sprintf("%s: %d elements; the sample shows %d: %s", path, len(g), len(w), compact(got))}
		}
		var diffs []string
		for i := range n {
			diffs = append(diffs, compareJSON(fmt.Sprintf("%s[%d]", path, i), key, w[i], g[i], masked)...)
		}
		return diffs
	case string:
		if g, ok := got.(string); ok && (g == w || sameDuration(w, g)) {
			return nil
		}
	default:
		if want == got {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: %s; the sample shows %s", path, compact(got), compact(want))}
}

// sameDuration: two spellings of one duration ("1m", "1m0s") are one value.
func sameDuration(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprint(v)
	case json.Number:
		if f, err := v.Float64(); err == nil && f == 0 {
			return "zero"
		}
		return "number"
	case string:
		if v == "" {
			return "empty string"
		}
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// compareText compares a command's output line by line; a last sample
// line "..." stands for the rest.
func compareText(want, got string) []string {
	wl := strings.Split(strings.TrimRight(want, "\n"), "\n")
	gl := strings.Split(strings.TrimRight(got, "\n"), "\n")
	open := strings.TrimSpace(wl[len(wl)-1]) == ellipsis
	if open {
		wl = wl[:len(wl)-1]
	}
	var diffs []string
	for i, w := range wl {
		if i >= len(gl) {
			diffs = append(diffs, fmt.Sprintf("line %d: not in the output; the sample shows %q", i+1, w))
			continue
		}
		if strings.TrimRight(w, " ") != strings.TrimRight(gl[i], " ") {
			diffs = append(diffs, fmt.Sprintf("line %d: %q; the sample shows %q", i+1, gl[i], w))
		}
	}
	if !open && len(gl) > len(wl) {
		diffs = append(diffs, fmt.Sprintf("%d more lines in the output than in the sample (end it with ... to show a part)", len(gl)-len(wl)))
	}
	return diffs
}

// The comparison that TestDocSamples relies on: what it masks, and that it
// still tells a drifted sample.
func TestCompareAnswer(t *testing.T) {
	okHeader := http.Header{"Ratelimit": {`"r/1s";r=4;t=2`}, "Date": {"today"}}
	tests := []struct {
		name, want string
		got        sampleAnswer
		include    bool
		drifts     bool
	}{
		{"same", `{"a":1,"event_id":"..."}`, sampleAnswer{body: []byte(`{"a":1,"event_id":"x-1"}`)}, false, false},
		{"other value", `{"a":1}`, sampleAnswer{body: []byte(`{"a":2}`)}, false, true},
		{"missing key", `{"a":1,"b":2}`, sampleAnswer{body: []byte(`{"a":1}`)}, false, true},
		{"extra key", `{"a":1}`, sampleAnswer{body: []byte(`{"a":1,"b":2}`)}, false, true},
		{"extra key shown as ...", `{"a":1,"...":"..."}`, sampleAnswer{body: []byte(`{"a":1,"b":2}`)}, false, false},
		{"masked time", `{"reset_after_ms":740}`, sampleAnswer{body: []byte(`{"reset_after_ms":1001}`)}, false, false},
		{"masked time of another kind", `{"retry_after_ms":740}`, sampleAnswer{body: []byte(`{"retry_after_ms":0}`)}, false, true},
		{"array tail", `{"r":[1,"..."]}`, sampleAnswer{body: []byte(`{"r":[1,2,3]}`)}, false, false},
		{"array length", `{"r":[1]}`, sampleAnswer{body: []byte(`{"r":[1,2]}`)}, false, true},
		{"duration spellings", `{"per":"1m"}`, sampleAnswer{body: []byte(`{"per":"1m0s"}`)}, false, false},
		{"failure without status line", `{"error":"x"}`, sampleAnswer{code: 400, body: []byte(`{"error":"x"}`)}, false, true},
		{"headers masked", "HTTP/1.1 200 OK\nRatelimit: \"r/1s\";r=4;t=1\n\n{}",
			sampleAnswer{status: "HTTP/1.1 200 OK", code: 200, header: okHeader, body: []byte(`{}`)}, true, false},
		{"header value", "HTTP/1.1 200 OK\nRatelimit: \"r/1s\";r=3;t=1\n\n{}",
			sampleAnswer{status: "HTTP/1.1 200 OK", code: 200, header: okHeader, body: []byte(`{}`)}, true, true},
		{"status", "HTTP/1.1 201 Created\nRatelimit: \"r/1s\";r=4;t=1\n\n{}",
			sampleAnswer{status: "HTTP/1.1 200 OK", code: 200, header: okHeader, body: []byte(`{}`)}, true, true},
		{"text", "a\nb", sampleAnswer{body: []byte("a\nc\n")}, false, true},
		{"text prefix", "a\n...", sampleAnswer{body: []byte("a\nc\n")}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diffs := compareAnswer(tt.want, tt.got, tt.include, nil)
			if (len(diffs) > 0) != tt.drifts {
				t.Fatalf("differences %q; want some: %v", diffs, tt.drifts)
			}
		})
	}
	t.Run("mask option", func(t *testing.T) {
		want, got := `{"remaining":3}`, sampleAnswer{body: []byte(`{"remaining":7}`)}
		if diffs := compareAnswer(want, got, false, nil); len(diffs) == 0 {
			t.Fatal("an unmasked counter that differs passed")
		}
		if diffs := compareAnswer(want, got, false, []string{"remaining"}); len(diffs) > 0 {
			t.Fatalf("a masked counter differs: %q", diffs)
		}
	})
}

func TestShellWords(t *testing.T) {
	vars := map[string]string{"API_TOKEN": "t0k"}
	got, err := shellWords("curl -s -H \"Authorization: Bearer $API_TOKEN\" \\\n  -d '{\"a\": \"$x\"}' localhost:8080/x # comment", vars)
	want := []string{"curl", "-s", "-H", "Authorization: Bearer t0k", "-d", `{"a": "$x"}`, "localhost:8080/x"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("words %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{`curl -H "$(cat .local/run/api-token)"`, `curl $OTHER`, `curl x | jq`} {
		if _, err := shellWords(bad, vars); err == nil {
			t.Errorf("%s: no error; the runner cannot run it as a shell would", bad)
		}
	}
}
