package ops

import (
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Bounds of a lingering close: what is read and dropped of a refused
// request after its error answer, and for how long at most.
const (
	lingerBytes = 1 << 20
	lingerTime  = time.Second
)

// lingerListener hands out lingerConns. fasthttp closes a connection right
// after answering a request it could not read (a body over its bound, say)
// while the client may still be sending it; the kernel then resets the
// connection, and a reset can destroy the error answer before the client
// reads it. net/http half-closes and waits instead; a lingerConn marked by
// the error handler does the same, draining what the client still sends.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{Conn: c}, nil
}

// lingerConn is a connection whose Close, once lingerOnClose was called,
// sends FIN, reads and drops up to lingerBytes for up to lingerTime, then
// closes, in a goroutine of its own.
type lingerConn struct {
	net.Conn
	linger atomic.Bool
}

func (c *lingerConn) Close() error {
	if !c.linger.Load() {
		return c.Conn.Close()
	}
	go func() {
		if tcp, ok := c.Conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
		_ = c.Conn.Close()
	}()
	return nil
}

// lingerOnClose marks conn, a connection of a lingerListener (or TLS over
// one), to linger when it is closed.
func lingerOnClose(conn net.Conn) {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	if c, ok := conn.(*lingerConn); ok {
		c.linger.Store(true)
	}
}
