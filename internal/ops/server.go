package ops

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
)

// NewServer returns an http.Server serving h with timeouts and a header
// limit, so a slow or hostile client cannot hold a connection or memory:
// headers within 5 s, reads within 10 s, writes within 10 s (the profiles
// extend their own deadline), idle keep-alives 120 s, headers 64 KiB.
func NewServer(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

// DefaultMaxConns bounds a Listener's open connections: gateways keep a
// pool of keep-alive connections each (nginx's upstream keepalive, a Go
// client's idle connections), a few thousand across a fleet. Each costs
// fasthttp about 17 KiB idle, and up to about 200 KiB once it has carried
// a request with headers near the 64 KiB bound (its read buffer and its
// request's buffers stay with it while it is idle); net/http about 10 KiB.
const DefaultMaxConns = 10_000

// Listener serves one handler on one address, from Listen to Shutdown,
// with NewServer's settings: a part of a process's lifecycle.
type Listener struct {
	// Var names the variable Addr comes from, for errors: "LISTEN_ADDR".
	Var     string
	Addr    string
	Handler http.Handler
	// Fast, when set, is served by fasthttp (NewFastServer) instead of
	// Handler by net/http: the decision port's.
	Fast fasthttp.RequestHandler
	// TLS, when set, serves HTTPS only.
	TLS *tls.Config
	Log *zap.Logger
	// MaxConns bounds the open connections; 0: DefaultMaxConns. Past it
	// fasthttp answers a new connection 503 and closes it; net/http
	// leaves it unaccepted, in the kernel's queue, until one closes.
	MaxConns int

	srv   *http.Server
	fast  *fasthttp.Server
	conns fastConns // fast's open connections
	ln    net.Listener
	bound atomic.Pointer[string] // ln's address, for Address
}

// Listen binds the address; nothing is served before Serve.
func (l *Listener) Listen(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", l.Addr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", l.Var, l.Addr, err)
	}
	maxConns := l.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	if l.Fast != nil {
		ln = lingerListener{ln}
	} else {
		ln = netutil.LimitListener(ln, maxConns)
	}
	if l.TLS != nil {
		ln = tls.NewListener(ln, l.TLS)
	}
	l.ln = ln
	bound := ln.Addr().String()
	l.bound.Store(&bound)
	if l.Fast != nil {
		l.fast = NewFastServer(l.Fast, l.Log)
		l.fast.Concurrency = maxConns
		l.fast.ConnState = l.conns.track
		return nil
	}
	l.srv = NewServer(l.Handler, l.Log)
	return nil
}

// Address returns the bound address (the port chosen for ":0") once
// Listen has bound it, "" before. It is safe to call from any goroutine.
func (l *Listener) Address() string {
	if p := l.bound.Load(); p != nil {
		return *p
	}
	return ""
}

// Serve serves until Shutdown, then returns nil; any other end of the
// server is its error.
func (l *Listener) Serve(context.Context) error {
	var err error
	if l.fast != nil {
		err = l.fast.Serve(l.ln) // nil once shut down
	} else {
		err = l.srv.Serve(l.ln)
	}
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s %s: %w", l.Var, l.Address(), err)
}

// Shutdown stops accepting connections and waits, until ctx ends, for the
// requests in flight; past that the remaining connections are closed.
func (l *Listener) Shutdown(ctx context.Context) error {
	if l.fast != nil {
		err := shutdownFast(ctx, l.fast, &l.conns)
		_ = l.ln.Close() // in case Serve never ran
		return err
	}
	if l.srv == nil {
		return nil
	}
	err := l.srv.Shutdown(ctx)
	if err != nil {
		_ = l.srv.Close()
	}
	_ = l.ln.Close() // in case Serve never ran: the server closes only what it served
	return err
}
