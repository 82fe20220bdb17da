package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// Rotating addresses within one IPv6 /64 earns no new budget through Envoy's
// API: the shipped recipe's login descriptor (generic_key login, then
// remote_address) admits 5 calls to ten addresses of one /64, over gRPC
// and POST /json alike, as it does to one address; the events keep the
// addresses as they were sent.
func TestRLSAddressRotationWithinAPrefix(t *testing.T) {
	e := newEnv(t)
	// The recipe's login limit, per minute rather than per second so that
	// no window can end between the calls.
	dir := rlsDir(t, map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {name: login_per_address, algorithm: sliding_window, unit: minute, requests_per_unit: 5}
`})
	lim := e.start("limiter", "RLS_CONFIG_DIR", dir)
	client := rlsClient(t, lim)
	codes := map[string]int{}
	for i := range 10 {
		addr := fmt.Sprintf("2001:db8:7:7::%x", i+1)
		var code string
		if i%2 == 0 {
			resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("edge", "generic_key=login,remote_address="+addr))
			if err != nil {
				t.Fatal(err)
			}
			code = resp.OverallCode.String()
		} else {
			code = rlsJSON(t, lim, "edge", "generic_key=login,remote_address="+addr)
		}
		codes[code]++
	}
	if codes["OK"] != 5 || codes["OVER_LIMIT"] != 5 {
		t.Fatalf("ten addresses of one /64: %v, want 5 OK and 5 OVER_LIMIT", codes)
	}
	// Events are published asynchronously: wait for the last one.
	testkit.WaitFor(t, 10*time.Second, "an event with the full address 2001:db8:7:7::a", func() bool {
		_, ok := findDecision(t, e.broker, func(d event.Decision) bool { return d.IP == "2001:db8:7:7::a" })
		return ok
	})
}

// rlsJSON sends one descriptor ("key=value,...") of domain to the limiter's
// POST /json and returns the overall code it answered.
func rlsJSON(t *testing.T, lim *proc, domain, descriptor string) string {
	t.Helper()
	var entries []string
	for _, kv := range strings.Split(descriptor, ",") {
		k, v, _ := strings.Cut(kv, "=")
		entries = append(entries, fmt.Sprintf(`{"key":%q,"value":%q}`, k, v))
	}
	body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[%s]}]}`, domain, strings.Join(entries, ","))
	resp, err := http.Post("http://"+lim.addr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests:
	default:
		t.Fatalf("/json: %d %s", resp.StatusCode, b)
	}
	var out struct {
		OverallCode string `json:"overallCode"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("/json answer %s: %v", b, err)
	}
	return out.OverallCode
}

// A scanner whose Envoy paths end in %00 or %0a (decoded into control
// characters) is limited, detected and archived like any other: its
// events are valid (the control characters percent-encoded), the detector
// bans it for scanning, and its violations reach rate_limit_violations.
func TestRLSControlCharacterPathsAreDetected(t *testing.T) {
	e, db := archiverEnv(t)
	dir := rlsDir(t, map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: remote_address
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1}
`})
	detector := e.start("detector")
	lim := e.start("limiter", "RLS_CONFIG_DIR", dir)
	e.start("archiver")
	client := rlsClient(t, lim)
	const scanner = "203.0.113.77"
	call := func(path string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("edge", "remote_address="+scanner+",path="+path))
		if err != nil {
			t.Fatalf("path %q: %v", path, err)
		}
		return resp.OverallCode
	}
	// The first path twice: the second call is over its limit of 1, in one
	// hour's window. (The guard comes after the processes' start, which a
	// loaded machine may take long over.)
	testkit.AvoidHourEnd(t)
	if c := call("/scan/0%00"); c != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v", c)
	}
	if c := call("/scan/0%00"); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call of one path: %v, want OVER_LIMIT", c)
	}
	waitConsuming(t, detector, 2)
	// Then 60 distinct paths within the scan window (50 in 10 s).
	for i := 1; i <= 60; i++ {
		suffix := "%00"
		if i%2 == 1 {
			suffix = "%0a"
		}
		call(fmt.Sprintf("/scan/%d%s", i, suffix))
	}
	b := bans(t, e, 1)[0]
	if b.Action != event.ActionBan || b.Subject != scanner || b.Reason != "scan" {
		t.Fatalf("ban message %+v, want a scan ban of %s", b, scanner)
	}
	for _, ep := range b.Evidence.SampleEndpoints {
		if event.HasControl(ep) {
			t.Errorf("evidence endpoint %q holds a control character", ep)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the limiter to enforce the ban", func() bool {
		return call("/anything") == rlsv3.RateLimitResponse_OVER_LIMIT
	})
	query := fmt.Sprintf(`SELECT count(*) FROM rate_limit_violations
		WHERE host(ip_address) = '%s' AND endpoint = '/scan/0%%00' AND rule_id LIKE 'rls.edge.%%'`, scanner)
	testkit.WaitFor(t, 15*time.Second, "the violation in Postgres", func() bool { return count(t, db, query) == 1 })
	if n := count(t, db, "SELECT count(*) FROM dead_letters"); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}
