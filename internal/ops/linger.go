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
// closes, in a goroutine of its own. It also tells whether any byte has
// arrived on it (unused).
type lingerConn struct {
	net.Conn
	linger atomic.Bool
	used   atomic.Bool // a byte has arrived
}

func (c *lingerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	return n, err
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
	if c := lingerConnOf(conn); c != nil {
		c.linger.Store(true)
	}
}

// unused reports whether no byte has arrived on conn, a connection of a
// lingerListener (or TLS over one; the handshake counts).
func unused(conn net.Conn) bool {
	c := lingerConnOf(conn)
	return c != nil && !c.used.Load()
}

func lingerConnOf(conn net.Conn) *lingerConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	c, _ := conn.(*lingerConn)
	return c
}
