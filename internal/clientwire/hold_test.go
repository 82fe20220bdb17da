package clientwire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/internal/decide"
)

// reportAnswer is a transport that answers every report, with no network.
type reportAnswer struct{}

func (reportAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader([]byte(`{"event_id":"e","mode":"redis","rules":[]}`))), Request: r}, nil
}

var reporter struct {
	once sync.Once
	c    *client.Client
	err  error
}

// holdAccepted reports whether the client sends a report naming hold, as
// it does only when the limiter would accept the hold: it refuses any
// other as invalid, before a call.
func holdAccepted(t *testing.T, hold string) bool {
	t.Helper()
	reporter.once.Do(func() {
		reporter.c, reporter.err = client.New(client.Config{URL: "http://limiter:8080", Transport: reportAnswer{}})
	})
	if reporter.err != nil {
		t.Fatal(reporter.err)
	}
	_, err := reporter.c.Report(context.Background(), &client.Outcome{IP: "203.0.113.7", Endpoint: "/a", Status: 200, Hold: hold})
	if err != nil && !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("report with hold %q: %v", hold, err)
	}
	return err == nil
}

// The client refuses exactly the holds the limiter refuses, and sends
// every hold the limiter answers.
func TestHoldsAreTheLimiters(t *testing.T) {
	for _, h := range []string{decide.NewHoldID(), decide.NewHoldID(), "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAB",
		"AAAAAAAAAAAAAAAAAAAAAQ", "q1Vn2oXkT0aBw3+/9zYxLg", "q1Vn2oXkT0aBw3-_9zYxL", "q1Vn2oXkT0aBw3-_9zYxLgA", "q1Vn2oXkT0aBw3-_9zYx=="} {
		if mine, theirs := holdAccepted(t, h), decide.ValidHoldID(h); mine != theirs {
			t.Errorf("hold %q: the client sends it %v, the limiter accepts it %v", h, mine, theirs)
		}
	}
}

func FuzzHoldsAreTheLimiters(f *testing.F) {
	f.Add(decide.NewHoldID())
	f.Add("AAAAAAAAAAAAAAAAAAAAAB")
	f.Fuzz(func(t *testing.T, h string) {
		if h == "" {
			return // no hold: nothing to release
		}
		if mine, theirs := holdAccepted(t, h), decide.ValidHoldID(h); mine != theirs {
			t.Fatalf("hold %q: the client sends it %v, the limiter accepts it %v", h, mine, theirs)
		}
	})
}
