package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// rawServer answers every request read on its connections with one canned
// decision, allocating nothing itself, so that a benchmark's allocation
// count is the client's (an httptest server would add net/http's).
func rawServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(decisionBody)) + "\r\n\r\n" + decisionBody)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { serveRaw(conn, answer) })
		}
	})
	return ln.Addr().String()
}

func serveRaw(conn net.Conn, answer []byte) {
	r := bufio.NewReader(conn)
	for {
		length := 0
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				n, _ := parseDecimal(bytes.TrimSpace(v))
				length = int(n)
			}
		}
		if _, err := r.Discard(length); err != nil {
			return
		}
		if _, err := conn.Write(answer); err != nil {
			return
		}
	}
}

// BenchmarkRequest is the whole per-request path of a worker: draw a
// request over a million keys, build it, send it, read and classify the
// answer, count it.
func BenchmarkRequest(b *testing.B) {
	addr := rawServer(b)
	sched := newSchedule(time.Now(), 0, time.Hour, 0, 0)
	traffic := testTraffic(Mix{Normal: 1}, func(c *TrafficConfig) { c.Keys = 1_000_000 })
	w := newWorker(0, 1, sched, traffic, newHTTPSender(newRequestBuilder(target{addr: addr, host: addr, path: checkPath}), newClient(addr, 5*time.Second)), 1)
	defer w.sender.close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		w.traffic.Next(w.rng, &w.draws[0])
		w.outcomes[0] = outcome{profile: w.draws[0].Profile}
		if err := w.sender.send(ctx, w.draws, now, w.outcomes); err != nil {
			b.Fatal(w.outcomes[0].err, err)
		}
		w.outcomes[0].latency = time.Since(now)
		w.record(w.outcomes, true)
	}
	if w.tally.denied != uint64(b.N) {
		b.Fatalf("%d denials in %d requests", w.tally.denied, b.N)
	}
}

// BenchmarkBuildRequest is the part of a request that prebuilt requests
// would save: drawing a key and writing its body and head.
func BenchmarkBuildRequest(b *testing.B) {
	traffic := testTraffic(Mix{90, 8, 2, 0}, func(c *TrafficConfig) { c.Keys = 1_000_000 })
	h := newHTTPSender(newRequestBuilder(target{addr: "127.0.0.1:8080", host: "127.0.0.1:8080", path: checkPath}), nil)
	w := newWorker(0, 1, nil, traffic, h, 1)
	b.ReportAllocs()
	for b.Loop() {
		w.traffic.Next(w.rng, &w.draws[0])
		h.body = w.draws[0].AppendJSON(h.body[:0])
		h.req = h.builder.append(h.req[:0], h.body)
	}
}
