package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
)

// A limiter restarted under the client: the kept-alive connections it
// closed are redialed, and no check fails for them.
func TestLimiterRestartFailsNoCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, allowedAnswer)
		})}
		go func() { _ = srv.Serve(ln) }()
		return srv
	}
	srv := serve(ln)
	c := newClient(t, Config{URL: "http://" + addr, BreakerFailures: 1})
	ctx := context.Background()
	req := &Request{IP: "203.0.113.7", Endpoint: "/a"}
	for range 3 { // a connection or more in the pool
		if _, err := c.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Shutdown(ctx); err != nil { // closes the idle connections
		t.Fatal(err)
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv = serve(ln)
	t.Cleanup(func() { _ = srv.Close() })
	for i := range 3 {
		if d, err := c.Check(ctx, req); err != nil || d.Fallback {
			t.Fatalf("check %d after the restart: %+v, %v", i, d, err)
		}
	}
}

// A connection net/http's transport found closed under a request counts as
// one the limiter closed, so the request is sent again on a new one: a
// restart failed a check with "use of closed network connection" on a
// loaded machine.
func TestClosedConnections(t *testing.T) {
	for _, err := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed,
		&net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}} {
		if !closedConn(fmt.Errorf("post: %w", err)) {
			t.Errorf("%v: not a closed connection", err)
		}
	}
	if closedConn(context.DeadlineExceeded) {
		t.Error("a deadline read as a closed connection")
	}
}
