package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// answering returns a server that answers every request with status,
// content type and body, as a proxy between the client and a limiter
// might.
func answering(t *testing.T, status int, contentType, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// Answers that are not the API's (a proxy's 502 page) mean the limiter may
// be down: enough of them open the breaker. The API's own refusals (400, 401, 413) are the
// answers of a limiter that works, and never open it.
func TestBreakerCountsBadAnswersNotRefusals(t *testing.T) {
	t.Parallel()
	const failures = 3
	req := &client.Request{IP: "192.0.2.1", Endpoint: "/api/x"}
	t.Run("502 opens it", func(t *testing.T) {
		t.Parallel()
		srv := answering(t, 502, "text/html", "<html>bad gateway</html>")
		c := newClient(t, client.Config{URL: srv.URL, BreakerFailures: failures, BreakerOpen: time.Hour})
		for i := range failures {
			if _, err := c.Check(context.Background(), req); errors.Is(err, client.ErrBreakerOpen) {
				t.Fatalf("call %d: the breaker open before %d failures", i+1, failures)
			}
		}
		_, err := c.Check(context.Background(), req)
		var e *client.Error
		if !errors.As(err, &e) || !errors.Is(err, client.ErrBreakerOpen) || e.Answered {
			t.Fatalf("after %d failures: %v, want an unanswered *Error with ErrBreakerOpen", failures, err)
		}
		if s := c.Stats(); s.BreakerOpen != 1 || s.Fallbacks != failures+1 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("401 does not", func(t *testing.T) {
		t.Parallel()
		srv := answering(t, 401, "application/json", `{"error":"missing or invalid bearer token"}`)
		c := newClient(t, client.Config{URL: srv.URL, BreakerFailures: failures, BreakerOpen: time.Hour})
		for i := range 3 * failures {
			_, err := c.Check(context.Background(), req)
			var e *client.Error
			if !errors.As(err, &e) || !e.Answered || e.Status != 401 || e.Message != "missing or invalid bearer token" {
				t.Fatalf("call %d: %v, want the 401", i+1, err)
			}
		}
		if s := c.Stats(); s.BreakerOpen != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}
