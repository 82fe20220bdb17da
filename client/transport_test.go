package client_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"testing"

	"github.com/ratewarden/ratewarden/client"
)

// countingTransport records the paths of the calls it makes.
type countingTransport struct {
	mu    sync.Mutex
	paths []string
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.paths = append(t.paths, r.URL.Path)
	t.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// Every call goes through Config.Transport: checks, reports, pings.
func TestTransportMakesEveryCall(t *testing.T) {
	srv := answering(t, 200, "application/json", `{"allowed":true,"reason":"ok","mode":"redis","event_id":"e",`+
		`"reports":[{"event_id":"e","mode":"redis","rules":[]}],"checks":[]}`)
	rt := &countingTransport{}
	c := newClient(t, client.Config{URL: srv.URL, Transport: rt})
	ctx := context.Background()
	if d, err := c.Check(ctx, &client.Request{IP: "203.0.113.7", Endpoint: "/a"}); err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("check: %+v, %v", d, err)
	}
	if _, err := c.ReportBatch(ctx, []client.Outcome{{IP: "203.0.113.7", Endpoint: "/a", Status: 200}}); err != nil {
		t.Fatalf("report: %v", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	want := []string{"/v1/check", "/v1/report/batch", "/v1/check/batch"}
	if len(rt.paths) != len(want) {
		t.Fatalf("the transport made %q, want %q", rt.paths, want)
	}
	for i := range want {
		if rt.paths[i] != want[i] {
			t.Fatalf("the transport made %q, want %q", rt.paths, want)
		}
	}
	if _, err := client.New(client.Config{URL: "https://limiter:8443", TLS: &tls.Config{}, Transport: rt}); err == nil {
		t.Fatal("TLS and Transport both accepted: TLS would not apply")
	}
}
