package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// maxFastHeaders bounds a fasthttp listener's request headers (fasthttp's
// read buffer, held per open connection; longer headers are answered 431).
// Its bodies are bounded by jsonwire.MaxBody, every route's own bound (a
// longer one is answered 413 and the connection closed).
const maxFastHeaders = 64 << 10

// NewFastServer is NewServer for fasthttp, with NewServer's bounds where
// fasthttp has them: a request, headers and body, within 5 s (fasthttp has
// one deadline for both; 5 s is NewServer's for headers, and a decision
// body is small), a response written within 10 s,
// idle keep-alives 120 s, headers 64 KiB (fasthttp's read buffer, one per
// open connection), bodies 64 KiB. Errors of the request itself (too
// large, malformed, too slow) are answered in JSON as the handlers' are.
func NewFastServer(h fasthttp.RequestHandler, log *zap.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               h,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          10 * time.Second,
		IdleTimeout:           120 * time.Second,
		ReadBufferSize:        maxFastHeaders,
		MaxRequestBodySize:    jsonwire.MaxBody,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		ErrorHandler:          fastRequestError,
		Logger:                zap.NewStdLog(log.Named("http")),
	}
}

// fastRequestError answers a request fasthttp could not read; the server
// closes the connection after it, lingering (lingerConn) so that a client
// still sending reads the answer rather than a reset. A connection on which
// nothing arrived within the read timeout (a client's spare pooled
// connection, say) is closed without an answer, as net/http closes it: a
// client that sends its request just then would read a 408 for it.
func fastRequestError(ctx *fasthttp.RequestCtx, err error) {
	var netErr net.Error
	timeout := errors.As(err, &netErr) && netErr.Timeout()
	if timeout && unused(ctx.Conn()) {
		_ = ctx.Conn().Close() // fasthttp's answer then goes nowhere
		return
	}
	lingerOnClose(ctx.Conn())
	status, msg := http.StatusBadRequest, "malformed request"
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", jsonwire.MaxBody)
	case errors.As(err, &small):
		status, msg = http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request headers larger than %d bytes", maxFastHeaders)
	case timeout:
		status, msg = http.StatusRequestTimeout, "request not received in time"
	}
	b, _ := json.Marshal(map[string]string{"error": msg})
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// fastConns tracks a fasthttp server's open connections, so that a
// shutdown past its deadline can close them: fasthttp leaves them open.
type fastConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook. fasthttp calls it twice per
// request too (active, idle), so only opening and closing take the lock.
func (c *fastConns) track(conn net.Conn, state fasthttp.ConnState) {
	switch state {
	case fasthttp.StateNew:
		c.mu.Lock()
		if c.conns == nil {
			c.conns = make(map[net.Conn]struct{})
		}
		c.conns[conn] = struct{}{}
		c.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		c.mu.Lock()
		delete(c.conns, conn)
		c.mu.Unlock()
	}
}

func (c *fastConns) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.conns {
		_ = conn.Close()
	}
}

// shutdownFast stops srv as http.Server.Shutdown stops a server: no new
// connections, idle ones closed, requests in flight answered until ctx
// ends, then every connection closed.
func shutdownFast(ctx context.Context, srv *fasthttp.Server, conns *fastConns) error {
	err := srv.ShutdownWithContext(ctx)
	if err != nil {
		conns.closeAll()
	}
	return err
}
