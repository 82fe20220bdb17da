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
// be down, and a refused token that the client gets no decision from it:
// enough of them open the breaker. A refusal of the request itself (400,
// 413) is the answer of a limiter that works, and never opens it.
func TestBreakerCountsFailuresNotRefusals(t *testing.T) {
	t.Parallel()
	const failures = 3
	req := &client.Request{IP: "192.0.2.1", Endpoint: "/api/x"}
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"502", "text/html", "<html>bad gateway</html>", 502},
		{"401", "application/json", `{"error":"missing or invalid bearer token"}`, 401},
	} {
		t.Run(tc.name+" opens it", func(t *testing.T) {
			t.Parallel()
			srv := answering(t, tc.status, tc.contentType, tc.body)
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
			want := client.Stats{Checks: failures + 1, Fallbacks: failures + 1, BreakerOpen: 1}
			if tc.status == 401 {
				want.Unauthorized = failures
			}
			if s := c.Stats(); s != want {
				t.Fatalf("stats %+v, want %+v", s, want)
			}
		})
	}
	t.Run("400 does not", func(t *testing.T) {
		t.Parallel()
		srv := answering(t, 400, "application/json", `{"error":"endpoint: required"}`)
		c := newClient(t, client.Config{URL: srv.URL, BreakerFailures: failures, BreakerOpen: time.Hour})
		for i := range 3 * failures {
			d, err := c.Check(context.Background(), req)
			var e *client.Error
			if !errors.As(err, &e) || !e.Answered || e.Status != 400 || e.Message != "endpoint: required" || d.Allowed || d.Reason != client.ReasonInvalid {
				t.Fatalf("call %d: %+v, %v, want the 400's refusal", i+1, d, err)
			}
		}
		if s := c.Stats(); s.BreakerOpen != 0 || s.Invalid != 3*failures {
			t.Fatalf("stats %+v", s)
		}
	})
}
