package clientaddr_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/client/internal/clientaddr"
)

func TestResolverOf(t *testing.T) {
	res := clientaddr.Resolver{Trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	}}
	tests := []struct {
		name, peer, xff, realIP, want string
	}{
		{"untrusted peer ignores headers", "203.0.113.9:5000", "1.1.1.1", "2.2.2.2", "203.0.113.9"},
		{"trusted peer, one hop", "10.0.0.2:80", "198.51.100.4", "", "198.51.100.4"},
		{"right-most untrusted wins over spoofed left", "10.0.0.2:80", "6.6.6.6, 198.51.100.4, 10.0.0.7", "", "198.51.100.4"},
		{"several header lines", "10.0.0.2:80", "6.6.6.6\n198.51.100.4", "", "198.51.100.4"},
		{"all trusted gives left-most", "10.0.0.2:80", "10.1.1.1, 10.2.2.2", "", "10.1.1.1"},
		{"garbage stops at last valid hop", "10.0.0.2:80", "not-an-ip, 10.9.9.9", "", "10.9.9.9"},
		{"x-real-ip from trusted peer", "10.0.0.2:80", "", "198.51.100.5", "198.51.100.5"},
		{"ipv6 trusted peer, mapped client", "[::1]:80", "::ffff:198.51.100.6", "", "198.51.100.6"},
		{"ipv6 client with port", "[::1]:80", "[2001:db8::5]:1234", "", "2001:db8::5"},
		{"untrusted ipv4-mapped peer", "[::ffff:203.0.113.1]:5", "", "", "203.0.113.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
			r.RemoteAddr = tt.peer
			for _, line := range strings.Split(tt.xff, "\n") {
				if line != "" {
					r.Header.Add("X-Forwarded-For", line)
				}
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			if got := res.Of(r); got.String() != tt.want {
				t.Fatalf("Of = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestResolverResolve(t *testing.T) {
	res := clientaddr.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	tests := []struct {
		name, peer string
		xff        []string
		realIP     string
		want       string
	}{
		{"untrusted peer ignores values", "203.0.113.9", []string{"1.1.1.1"}, "2.2.2.2", "203.0.113.9"},
		{"values right to left", "10.0.0.2", []string{"6.6.6.6", "198.51.100.4,10.0.0.7"}, "", "198.51.100.4"},
		{"trailing comma stops at the last valid hop", "10.0.0.2", []string{"198.51.100.4,"}, "", "10.0.0.2"},
		{"x-real-ip without x-forwarded-for", "10.0.0.2", nil, "198.51.100.5", "198.51.100.5"},
		{"invalid x-real-ip keeps the peer", "10.0.0.2", nil, "nope", "10.0.0.2"},
		{"no peer", "", []string{"1.1.1.1"}, "", "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := res.Resolve(clientaddr.Parse(tt.peer), tt.xff, tt.realIP); got.String() != tt.want {
				t.Fatalf("Resolve = %s, want %s", got, tt.want)
			}
		})
	}
}
