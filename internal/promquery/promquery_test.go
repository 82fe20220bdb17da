package promquery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	ok := `{"status":"success","data":{"resultType":"vector","result":[
		{"metric":{"rule":"login"},"value":[1700000000.1,"12.5"]},
		{"metric":{"rule":"api"},"value":[1700000000.1,"NaN"]},
		{"metric":{},"value":[1700000000.1,"3"]}]}}`
	got, err := Decode(http.StatusOK, []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	by := By(got, "rule")
	if len(got) != 2 || by["login"] != 12.5 || by[""] != 3 {
		t.Fatalf("Decode = %+v, by rule %v", got, by)
	}
	for name, c := range map[string]struct {
		status int
		body   string
	}{
		"not JSON":         {200, `<html>`},
		"an error":         {400, `{"status":"error","errorType":"bad_data","error":"parse error"}`},
		"a 200 error":      {200, `{"status":"error","error":"x"}`},
		"a matrix":         {200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`},
		"a scalar":         {200, `{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}`},
		"no value":         {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}`},
		"a numeric value":  {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`},
		"a text value":     {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"many"]}]}}`},
		"labels not text":  {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"2"]}]}}`},
		"too many samples": {200, `{"status":"success","data":{"resultType":"vector","result":[` + strings.Repeat(`{"metric":{},"value":[1,"1"]},`, MaxSamples) + `{"metric":{},"value":[1,"1"]}]}}`},
	} {
		if s, err := Decode(c.status, []byte(c.body)); err == nil {
			t.Errorf("%s: Decode = %v, want an error", name, s)
		}
	}
}

// A hostile or broken server: an answer over MaxBody, one that never ends,
// and one too slow are errors, returned within the timeout.
func TestQueryHostile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("query") {
		case "huge":
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
			for range MaxBody / 16 {
				_, _ = w.Write([]byte(`{"metric":{}},  `))
			}
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		case "redirect":
			http.Redirect(w, r, "http://example.invalid/", http.StatusFound)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, 200*time.Millisecond, nil)
	for _, q := range []string{"huge", "slow", "redirect"} {
		if s, err := c.Query(context.Background(), q); err == nil {
			t.Errorf("%s: Query = %v, want an error", q, s)
		}
	}
}

// An answer is reused within TTL, and asked again after it; an error is
// not kept.
func TestQueryCache(t *testing.T) {
	var calls atomic.Int32
	fail := atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if fail.Load() {
			http.Error(w, `{"status":"error","error":"down"}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"source":"decisions"},"value":[1,"7"]}]}}`))
	}))
	defer srv.Close()
	now := time.Now()
	c := New(srv.URL, time.Second, func() time.Time { return now })
	for range 3 {
		s, err := c.Query(context.Background(), "lag")
		if err != nil || By(s, "source")["decisions"] != 7 {
			t.Fatalf("Query = %v, %v", s, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls within the TTL, want 1", n)
	}
	now = now.Add(TTL)
	fail.Store(true)
	if _, err := c.Query(context.Background(), "lag"); err == nil {
		t.Fatal("a failed query after the TTL answered")
	}
	// A failure is reused as long as an answer: a Prometheus down or slow
	// is not asked again by every page.
	if _, err := c.Query(context.Background(), "lag"); err == nil || calls.Load() != 2 {
		t.Fatalf("within the TTL of a failure: %v after %d calls, want the failure again after 2", err, calls.Load())
	}
	now = now.Add(TTL)
	if _, err := c.Query(context.Background(), "lag"); err == nil || calls.Load() != 3 {
		t.Fatalf("after the TTL of a failure: %v after %d calls, want a new call", err, calls.Load())
	}
}

// A page's own deadline ends its wait on a slow Prometheus, whatever the
// client's timeout.
func TestQueryWaitsNoLongerThanItsCaller(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	c := New(srv.URL, time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Query(ctx, "lag"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Query on a Prometheus that never answers, with a 50ms context: %v, want the context's deadline", err)
	}
}
