package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SlowProxy is a TCP proxy on loopback in front of a Redis that holds back
// some of its replies: a slow Redis, not a dead one. Every command reaches
// the server at once (so it executes and counts); the reply of every
// Every-th read from the server, counted across all connections, is
// forwarded only after Delay. A client whose deadline is shorter gives up on
// a round trip whose commands ran. The zero Every forwards everything at
// once. It can also lose a reply (LoseReply): the connection is cut after
// the server ran the commands, as a failover or a middlebox cuts it.
type SlowProxy struct {
	ln      net.Listener
	target  string
	every   atomic.Int64
	delay   atomic.Int64 // ns
	reads   atomic.Int64
	delayed atomic.Int64
	lose    atomic.Int64 // replies to forward before the one lost; -1: none
	lost    atomic.Int64
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// StartSlowProxy starts a proxy to target (host:port) and stops it when the
// test ends. It forwards without delay until SetDelay.
func StartSlowProxy(tb testing.TB, target string) *SlowProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &SlowProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.lose.Store(-1)
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *SlowProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay holds back every every-th reply by d (every 0: none).
func (p *SlowProxy) SetDelay(every int, d time.Duration) {
	p.delay.Store(int64(d))
	p.every.Store(int64(every))
}

// Delayed is the number of replies held back so far.
func (p *SlowProxy) Delayed() int64 { return p.delayed.Load() }

// LoseReply forwards the next skip reads from the server, on any
// connection, then drops the one after and cuts its connection: its
// commands ran, and their client never reads their replies.
func (p *SlowProxy) LoseReply(skip int) { p.lose.Store(int64(skip)) }

// Lost is the number of replies lost so far.
func (p *SlowProxy) Lost() int64 { return p.lost.Load() }

func (p *SlowProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Go(func() { p.pipe(s, c, false) })
		p.wg.Go(func() { p.pipe(c, s, true) })
	}
}

// track registers a client connection and its server connection, so that
// close can cut them; false once the proxy is closed.
func (p *SlowProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst until either fails, then closes both;
// replies (from the server) may be held back.
func (p *SlowProxy) pipe(dst, src net.Conn, replies bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if replies && p.loses() {
				return
			}
			if every := p.every.Load(); replies && every > 0 && p.reads.Add(1)%every == 0 {
				p.delayed.Add(1)
				time.Sleep(time.Duration(p.delay.Load()))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection
			return
		}
	}
}

// loses reports whether the read from the server now is the one to lose.
func (p *SlowProxy) loses() bool {
	for {
		n := p.lose.Load()
		if n < 0 {
			return false
		}
		if p.lose.CompareAndSwap(n, n-1) {
			if n == 0 {
				p.lost.Add(1)
			}
			return n == 0
		}
	}
}

func (p *SlowProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
