package ops

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// A listener, net/http's or fasthttp's, serves from Listen to Shutdown;
// Shutdown waits for the request in flight.
func TestListenerServesUntilShutdown(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run(map[bool]string{false: "net/http", true: "fasthttp"}[fast], func(t *testing.T) {
			inFlight := make(chan struct{})
			release := make(chan struct{})
			testServesUntilShutdown(t, slowListener(fast, inFlight, release), inFlight, release)
		})
	}
}

// slowListener answers "ok", on /slow once release is closed.
func slowListener(fast bool, inFlight, release chan struct{}) *Listener {
	l := &Listener{Var: "LISTEN_ADDR", Addr: "127.0.0.1:0", Log: zap.NewNop()}
	if fast {
		l.Fast = func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/slow" {
				close(inFlight)
				<-release
			}
			ctx.SetBodyString("ok")
		}
		return l
	}
	l.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(inFlight)
			<-release
		}
		io.WriteString(w, "ok")
	})
	return l
}

func testServesUntilShutdown(t *testing.T, l *Listener, inFlight, release chan struct{}) {
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background()) }()
	base := "http://" + l.Address()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		slow <- err
	}()
	<-inFlight
	stopped := make(chan error, 1)
	go func() { stopped <- l.Shutdown(context.Background()) }()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Shutdown: %v, want nil", err)
	}
	select {
	case <-stopped:
		t.Fatal("Shutdown returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", l.Address(), time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

func TestListenerErrorNamesTheVariable(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	l := &Listener{Var: "OPS_LISTEN_ADDR", Addr: taken.Addr().String(), Handler: http.NotFoundHandler(), Log: zap.NewNop()}
	err = l.Listen(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "OPS_LISTEN_ADDR "+taken.Addr().String()) {
		t.Fatalf("Listen on a taken address: %v, want an error naming OPS_LISTEN_ADDR", err)
	}
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of a listener that never listened: %v", err)
	}
}

// Past its deadline, a fasthttp listener's Shutdown closes the connections
// still busy, as net/http's does: fasthttp itself leaves them open.
func TestFastListenerShutdownDeadline(t *testing.T) {
	inFlight := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	l := slowListener(true, inFlight, release)
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	go func() { _ = l.Serve(context.Background()) }()
	conn, err := net.Dial("tcp", l.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-inFlight
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with a request in flight past its deadline returned nil")
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
}

// serveOK serves a fasthttp listener answering "ok" until the test ends.
func serveOK(t *testing.T) *Listener {
	t.Helper()
	l := &Listener{Var: "LISTEN_ADDR", Addr: "127.0.0.1:0", Log: zap.NewNop(),
		Fast: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	go func() { _ = l.Serve(context.Background()) }()
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	return l
}

// Requests fasthttp cannot read are answered in JSON with the status that
// names the fault, and the connection is closed.
func TestFastListenerRequestErrors(t *testing.T) {
	l := serveOK(t)
	tests := []struct {
		name, request string
		status        int
	}{
		{"headers over 64 KiB", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 65<<10) + "\r\n\r\n", 431},
		{"body over 64 KiB", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n" + strings.Repeat("b", 65537), 413},
		// sent in full before the answer is read: the server drains it
		// rather than resetting the connection under the answer
		{"body of 512 KiB", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 524288\r\n\r\n" + strings.Repeat("b", 512<<10), 413},
		{"malformed", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", l.Address())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tt.request); err != nil {
				t.Fatalf("sending the request: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !resp.Close || resp.Header.Get("Content-Type") != "application/json" ||
				!strings.HasPrefix(string(body), `{"error":"`) {
				t.Fatalf("%d close=%v %q: %s; want %d, JSON, connection closed", resp.StatusCode, resp.Close,
					resp.Header.Get("Content-Type"), body, tt.status)
			}
		})
	}
}

// A connection on which nothing arrives within the read timeout is closed
// without an answer (a client sending on it just then would take a 408 for
// its own answer); one that sent part of a request gets the 408.
func TestFastListenerReadTimeout(t *testing.T) {
	l := serveOK(t)
	for _, tt := range []struct {
		name, sent string
		answer     string // the status line's start; "": none
	}{
		{"nothing sent", "", ""},
		{"part of a request", "POST /v1/check HTTP/1.1\r\nHost: x\r\n", "HTTP/1.1 408"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", l.Address())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(conn, tt.sent); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(conn) // until the server closes
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(got), tt.answer) || (tt.answer == "" && len(got) > 0) {
				t.Fatalf("got %q before the close, want %q", got, tt.answer)
			}
		})
	}
}
