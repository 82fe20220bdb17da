// Package proctest holds what tests that run processes and servers share:
// a free loopback address, an output buffer readable while a process
// writes it, building commands (Build) and running one for the length of a
// test (Run).
package proctest

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address nothing listens on right now.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Output is a process's stdout and stderr, safe to read while it runs.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(b)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
