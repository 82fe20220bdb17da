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

// BenchmarkCheckHandlerLeased is BenchmarkCheckHandler on a leased hot key:
// one client IP under a leased fixed window of 1e9 a minute, so that nearly
// every decision is answered from the lease (no Redis round trip) and what
// is measured is the handler's own work on a leased decision: decode,
// match, lease, headers, answer, event. cpu-ns/op beside BenchmarkServeFloor
// says how much it adds to the bare exchange.
//
//	go test -run '^$' -bench '^BenchmarkCheckHandlerLeased$' -benchtime 200000x -count 5 ./internal/httpapi/
func BenchmarkCheckHandlerLeased(b *testing.B) {
	s := newStack(b, stackOptions{rules: `
rules:
  - {id: r, match: {endpoints: ["/api/**"]}, key: [ip], algorithm: fixed_window, limits: [{requests: 1000000000, per: 1m}], lease: true}
`, queueSize: 100000, start: true})
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	body := []byte(`{"ip":"100.64.0.0","endpoint":"/api/books/17","method":"GET"}`)
	serve := func(ctx *fasthttp.RequestCtx, req *fasthttp.Request) {
		req.Reset()
		req.Header.SetMethod("POST")
		req.SetRequestURI("/v1/check")
		req.SetBody(body)
		ctx.Init(req, peer, nil)
		s.handler(ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	for range 1000 { // the key turns hot and leases
		serve(&ctx, &req)
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		for pb.Next() {
			serve(&ctx, &req)
		}
	})
}
