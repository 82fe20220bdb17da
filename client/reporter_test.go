package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// A batch the limiter refuses whole (413: too large; 400: one invalid
// outcome) is sent again one outcome at a time, so that only an outcome at
// fault is lost.
func TestReportAsyncRefusedBatchSentOneByOne(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusRequestEntityTooLarge, http.StatusBadRequest} {
		var batches, singles atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/v1/report/batch":
				var b struct{ Reports []json.RawMessage }
				if json.NewDecoder(r.Body).Decode(&b) == nil && len(b.Reports) == 1 {
					singles.Add(1) // a batch of one, when the reporter found one outcome queued
					_, _ = w.Write([]byte(`{"reports":[{"event_id":"e","mode":"redis","rules":[]}]}`))
					return
				}
				batches.Add(1)
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"error":"refused"}`))
			case "/v1/report":
				singles.Add(1)
				_, _ = w.Write([]byte(`{"event_id":"e","mode":"redis","rules":[]}`))
			}
		}))
		t.Cleanup(srv.Close)
		c := newClient(t, client.Config{URL: srv.URL})
		const n = 7
		for range n {
			c.ReportAsync(&client.Outcome{IP: "192.0.2.1", Endpoint: "/api/x", Status: 200})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.ReportsSent != n || s.ReportsFailed != 0 || singles.Load() != n {
			t.Fatalf("batch answered %d: stats %+v, %d batches, %d single reports", status, s, batches.Load(), singles.Load())
		}
	}
}
