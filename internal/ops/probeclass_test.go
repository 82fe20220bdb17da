package ops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

func TestProbeErrorClass(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"deadline", fmt.Errorf("ping: %w", context.DeadlineExceeded), "timeout"},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379}, Err: syscall.ECONNREFUSED}, "connection refused"},
		{"dns", &net.DNSError{Err: "no such host", Name: "redis.internal"}, "name resolution"},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "connection"},
		{"other", errors.New("NOAUTH Authentication required for 10.1.2.3"), "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := probeErrorClass(tt.err); got != tt.want {
				t.Errorf("probeErrorClass(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
