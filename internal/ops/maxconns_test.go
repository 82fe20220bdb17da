package ops

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// With MaxConns open connections, fasthttp answers another 503 and closes
// it, net/http leaves it unserved until one closes; either then serves a
// new connection.
func TestListenerMaxConns(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run(map[bool]string{false: "net/http", true: "fasthttp"}[fast], func(t *testing.T) {
			l := &Listener{Var: "LISTEN_ADDR", Addr: "127.0.0.1:0", Log: zap.NewNop(), MaxConns: 2}
			if fast {
				l.Fast = func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }
			} else {
				l.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
			}
			if err := l.Listen(context.Background()); err != nil {
				t.Fatal(err)
			}
			go func() { _ = l.Serve(context.Background()) }()
			t.Cleanup(func() { _ = l.Shutdown(context.Background()) })

			get := func(c net.Conn) (string, error) {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // generous
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					return "", err
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.Status + " " + string(b), nil
			}
			dial := func() net.Conn {
				c, err := net.Dial("tcp", l.Address())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			open := []net.Conn{dial(), dial()}
			for i, c := range open {
				if got, err := get(c); err != nil || got != "200 OK ok" {
					t.Fatalf("connection %d: %q %v", i+1, got, err)
				}
			}
			third := dial()
			if fast {
				got, err := get(third)
				if err != nil || !strings.HasPrefix(got, "503 ") {
					t.Fatalf("a third connection: %q %v, want 503", got, err)
				}
			} else {
				answered := make(chan string, 1)
				go func() { got, err := get(third); answered <- got + " " + errString(err) }()
				select {
				case got := <-answered:
					t.Fatalf("a third connection was served: %q", got)
				case <-time.After(200 * time.Millisecond): // only a wrong answer can come sooner
				}
				open[0].Close()
				if got := <-answered; got != "200 OK ok " {
					t.Fatalf("the third connection once the first closed: %q", got)
				}
				return
			}
			open[0].Close()
			deadline := time.Now().Add(10 * time.Second) // generous: the server sees the close at once
			for {
				got, err := get(dial())
				if err == nil && got == "200 OK ok" {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("a connection after one closed: %q %v", got, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
