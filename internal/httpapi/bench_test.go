package httpapi_test

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkCheckHandler measures the decision path behind HTTP parsing:
// decode, match, one coalesced Redis round trip, headers, response, event.
// Real Redis and a real broker; 10 000 client IPs under one sliding-window
// rule, as make bench.
func BenchmarkCheckHandler(b *testing.B) {
	s := newStack(b, stackOptions{rules: ruleFor("sliding_window", "[{requests: 1000000, per: 1s}]"), queueSize: 100000})
	var n atomic.Int64
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		for pb.Next() {
			i := n.Add(1) % 10000
			req.Reset()
			req.Header.SetMethod("POST")
			req.SetRequestURI("/v1/check")
			req.SetBodyString(`{"ip":"10.0.` + strconv.Itoa(int(i/256)) + `.` + strconv.Itoa(int(i%256)) + `","endpoint":"/api/books/17"}`)
			ctx.Init(&req, peer, nil)
			s.handler(&ctx)
			if ctx.Response.StatusCode() != fasthttp.StatusOK {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	})
}
