package notifier

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// One attempt's result, by what the receiver does: a slow receiver is cut
// off by the timeout, a redirect is not followed, an endless answer is
// read only to the bound.
func TestPostResults(t *testing.T) {
	var redirected atomic.Bool
	release := make(chan struct{}) // the slow handler's end, at the test's
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") != "k1" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Token") != "t" {
			http.Error(w, "bad headers", http.StatusBadRequest)
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { redirected.Store(true) })
	mux.HandleFunc("/refused", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no such hook", http.StatusNotFound) })
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		chunk := []byte(strings.Repeat("x", 4096))
		for i := 0; i < 1<<14 && r.Context().Err() == nil; i++ { // 64 MiB unless cut off
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	s := newSender(200*time.Millisecond, time.Millisecond, time.Millisecond, zaptest.NewLogger(t), newMetrics(prometheus.NewRegistry(), nil))
	tests := []struct{ path, want string }{
		{"/ok", resultOK},
		{"/slow", resultTimeout},
		{"/redirect", resultRedirect},
		{"/refused", resultClient},
		{"/endless", resultServer},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := &Receiver{Name: "r", URL: srv.URL + tt.path, Headers: http.Header{"X-Token": {"t"}}}
			got, err := s.post(context.Background(), r, "k1", []byte(`{}`))
			if got != tt.want || (got == resultOK) != (err == nil) {
				t.Errorf("result %s (%v), want %s", got, err, tt.want)
			}
		})
	}
	if redirected.Load() {
		t.Error("the redirect was followed")
	}
	r := &Receiver{Name: "r", URL: "http://127.0.0.1:1/"}
	if got, _ := s.post(context.Background(), r, "k1", []byte(`{}`)); got != resultConnection {
		t.Errorf("a closed port: %s, want %s", got, resultConnection)
	}
}

// send retries until the receiver accepts, counting the attempts and the
// retries, and gives up only when its context ends.
func TestSendRetriesUntilAccepted(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	s := newSender(time.Second, time.Millisecond, 5*time.Millisecond, zaptest.NewLogger(t), newMetrics(reg, []string{"r"}))
	r := &Receiver{Name: "r", URL: srv.URL, Format: digest.FormatJSON}
	d := &digest.Digest{Group: digest.Group{Receiver: "r", Action: "ban", Scope: "ip", Scenario: "scan"}, Key: "k", Count: 7}
	if err := s.send(context.Background(), r, d); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("%d calls, want 4", got)
	}
	for name, want := range map[string]float64{"rate_limit_notifier_delivery_retries_total": 3, "rate_limit_notifier_digests_delivered_total": 1,
		"rate_limit_notifier_bans_delivered_total": 7} {
		if got := testkit.MetricSum(t, reg, name, map[string]string{"receiver": "r"}); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	calls.Store(-1 << 40) // busy for good
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.send(ctx, r, d); err == nil {
		t.Error("send returned nil from a receiver that never accepted")
	}
}

// The backoff doubles up to its bound, with jitter within half of it.
func TestBackoff(t *testing.T) {
	s := &sender{minBackoff: time.Second, maxBackoff: time.Minute}
	for attempt, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if got := s.backoff(attempt); got < want/2 || got > want {
			t.Errorf("attempt %d: %v, want within [%v, %v]", attempt, got, want/2, want)
		}
	}
	for _, attempt := range []int{10, 40, 1000} {
		if got := s.backoff(attempt); got < 30*time.Second || got > time.Minute {
			t.Errorf("attempt %d: %v, want within [30s, 1m]", attempt, got)
		}
	}
}
