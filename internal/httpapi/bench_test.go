package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkCheckHandler measures the decision path behind HTTP parsing:
// decode, match, one coalesced Redis round trip, headers, response, event.
// Real Redis and a real broker; 10 000 client IPs under one sliding-window
// rule, as make bench.
func BenchmarkCheckHandler(b *testing.B) {
	s := newStack(b, stackOptions{rules: ruleFor("sliding_window", "[{requests: 1000000, per: 1s}]"), queueSize: 100000})
	h := s.srv.Config.Handler
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1) % 10000
			body := `{"ip":"10.0.` + strconv.Itoa(int(i/256)) + `.` + strconv.Itoa(int(i%256)) + `","endpoint":"/api/books/17"}`
			r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}
