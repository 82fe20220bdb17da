package rules

import (
	"net/netip"
	"testing"
	"time"
)

// mustParse parses a rules file or fails the test.
func mustParse(tb testing.TB, yaml string) *File {
	tb.Helper()
	f, err := Parse([]byte(yaml))
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	return f
}

// mustCompile parses and compiles a rules file with the default options.
func mustCompile(tb testing.TB, yaml string) *Set {
	tb.Helper()
	s, err := Compile(mustParse(tb, yaml), Options{})
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return s
}

// request builds a request from an IP and an endpoint.
func request(ip, endpoint string) *Request {
	a := netip.MustParseAddr(ip)
	return &Request{IP: a.String(), Addr: a, Endpoint: endpoint, Method: "GET", Cost: 1}
}

// ids returns the rule ids of applied rules.
func ids(as []Applied) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Rule.ID
	}
	return out
}

func mustTime(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
