package main

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

// client is one keep-alive HTTP/1.1 connection, owned by one worker. It
// writes a prepared request in one write and reads the answer through its
// own buffer: no allocation, no goroutine, no per-request deadline timer
// (net/http's client costs several times that per request, CPU the server
// under test would rather have).
type client struct {
	addr    string
	timeout time.Duration
	dialer  net.Dialer

	// mu guards conn and stopped against interrupt, called from another
	// goroutine; the worker reads conn without it (it alone changes conn).
	mu      sync.Mutex
	conn    net.Conn
	stopped bool

	r        *bufio.Reader
	body     []byte
	deadline time.Time // of conn
}

func newClient(addr string, timeout time.Duration) *client {
	return &client{
		addr:    addr,
		timeout: timeout,
		dialer:  net.Dialer{Timeout: timeout, KeepAlive: -1},
		r:       bufio.NewReaderSize(nil, 4096),
		body:    make([]byte, 0, 1024),
	}
}

// roundTrip sends req and reads the answer; now is the caller's clock
// reading, to spare one. On failure it returns the error class and the
// connection is dropped, so the next call reconnects. The response body
// is valid until the next call.
func (c *client) roundTrip(ctx context.Context, req []byte, now time.Time) (response, errClass, error) {
	if c.conn == nil {
		if err := c.connect(ctx, now); err != nil {
			return response{}, errConnect, err
		}
	} else if c.deadline.Sub(now) < c.timeout/2 {
		// The deadline moves only once per half timeout: setting it costs
		// a timer update, too much per request. A request thus has between
		// timeout/2 and timeout to complete.
		c.setDeadline(now.Add(c.timeout))
	}
	if _, err := c.conn.Write(req); err != nil {
		c.drop()
		return response{}, ioClass(err, errWrite), err
	}
	res, body, err := readResponse(c.r, c.body)
	c.body = body
	if err != nil {
		c.drop()
		return response{}, ioClass(err, errRead), err
	}
	if res.close {
		c.drop()
	}
	return res, errNone, nil
}

func (c *client) connect(ctx context.Context, now time.Time) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		conn.Close()
		return context.Canceled
	}
	c.conn = conn
	c.r.Reset(conn)
	c.deadline = now.Add(c.timeout)
	return conn.SetDeadline(c.deadline)
}

func (c *client) setDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped { // else interrupt's deadline must stay
		c.deadline = t
		_ = c.conn.SetDeadline(t)
	}
}

// drop closes the connection.
func (c *client) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// interrupt makes the request in flight, if any, fail at once, and every
// later one fail: the run is over. Safe to call from any goroutine.
func (c *client) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.conn != nil {
		_ = c.conn.SetDeadline(time.Unix(1, 0))
	}
}
