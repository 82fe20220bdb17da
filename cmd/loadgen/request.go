package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// checkPath is the limiter's decision endpoint (docs/api.md "POST /v1/check").
const checkPath = "/v1/check"

// target is where the requests go.
type target struct {
	addr  string // host:port to dial
	host  string // the Host header
	path  string // the request target
	token string // the bearer token of every request; empty: none
}

// parseTarget reads the -url flag: an http:// base URL, to which endpoint
// (/v1/check, or /json) is appended unless it already ends with it.
func parseTarget(raw, endpoint string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return target{}, fmt.Errorf("%q: want an http:// URL such as http://127.0.0.1:8080 (TLS is not supported)", raw)
	}
	if u.Host == "" {
		return target{}, fmt.Errorf("%q: no host", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return target{}, fmt.Errorf("%q: want scheme, host, port and path only", raw)
	}
	t := target{host: u.Host, addr: u.Host, path: strings.TrimSuffix(u.EscapedPath(), "/")}
	if u.Port() == "" {
		t.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if !strings.HasSuffix(t.path, endpoint) {
		t.path += endpoint
	}
	return t, nil
}

// parseTargets reads a -url flag of one or more comma-separated base URLs,
// as parseTarget each.
func parseTargets(raw, endpoint string) ([]target, error) {
	var ts []target
	for u := range strings.SplitSeq(raw, ",") {
		t, err := parseTarget(u, endpoint)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// requestBuilder writes complete POST requests. Everything but the length
// and the body is built once: per request only those are appended.
type requestBuilder struct {
	head []byte // up to the Content-Length value
}

func newRequestBuilder(t target) requestBuilder {
	auth := ""
	if t.token != "" {
		auth = "Authorization: Bearer " + t.token + "\r\n"
	}
	return requestBuilder{head: []byte("POST " + t.path + " HTTP/1.1\r\n" +
		"Host: " + t.host + "\r\n" +
		auth +
		"Content-Type: application/json\r\n" +
		"Content-Length: ")}
}

// validToken reports whether a token can go in a header as it is: printable
// ASCII, no space.
func validToken(t string) bool {
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// append writes the request carrying body to dst; it does not allocate when
// dst has room.
func (b requestBuilder) append(dst, body []byte) []byte {
	dst = append(dst, b.head...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}
