package notifier

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// hook is a webhook receiver served by the test: it records every request
// and answers 503 while down.
type hook struct {
	srv  *httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	// accepted are the bodies answered 2xx, in order; attempts counts
	// every request.
	accepted []received
	attempts int
}

// received is one request as the receiver saw it.
type received struct {
	key  string // the Idempotency-Key header
	auth string
	body map[string]any
	raw  []byte
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.attempts++
		if h.down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("body is not JSON: %v", err)
		}
		h.accepted = append(h.accepted, received{key: r.Header.Get("Idempotency-Key"), auth: r.Header.Get("Authorization"), body: body, raw: raw})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// got returns a copy of the accepted requests and the count of attempts.
func (h *hook) got() ([]received, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.accepted...), h.attempts
}

// counted is the sum of the accepted digests' counts.
func (h *hook) counted() int {
	all, _ := h.got()
	n := 0
	for _, r := range all {
		if c, ok := r.body["count"].(float64); ok {
			n += int(c)
		}
	}
	return n
}
