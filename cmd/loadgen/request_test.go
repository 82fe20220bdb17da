package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in      string
		want    target
		wantErr string
	}{
		{in: "http://127.0.0.1:8080", want: target{addr: "127.0.0.1:8080", host: "127.0.0.1:8080", path: "/v1/check"}},
		{in: "http://127.0.0.1:8080/", want: target{addr: "127.0.0.1:8080", host: "127.0.0.1:8080", path: "/v1/check"}},
		{in: "http://limiter/v1/check", want: target{addr: "limiter:80", host: "limiter", path: "/v1/check"}},
		{in: "http://[::1]:9000/rl/", want: target{addr: "[::1]:9000", host: "[::1]:9000", path: "/rl/v1/check"}},
		{in: "https://limiter", wantErr: "TLS is not supported"},
		{in: "127.0.0.1:8080", wantErr: "want an http:// URL"},
		{in: "http://", wantErr: "no host"},
		{in: "http://h/?x=1", wantErr: "scheme, host, port and path only"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTarget(tt.in, checkPath)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseTarget(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRequestBuilderSendsTheToken(t *testing.T) {
	b := newRequestBuilder(target{addr: "127.0.0.1:8080", host: "127.0.0.1:8080", path: "/v1/check", token: "tok-0123456789abcdef"})
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b.append(nil, []byte(`{}`)))))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer tok-0123456789abcdef" {
		t.Fatalf("Authorization %q", got)
	}
	if _, err := parseFlags([]string{"-token", "a b\r\nX-Evil: 1"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-token") {
		t.Fatalf("a token that would inject a header: %v", err)
	}
}

func TestRequestBuilderExactBytes(t *testing.T) {
	b := newRequestBuilder(target{addr: "127.0.0.1:8080", host: "127.0.0.1:8080", path: "/v1/check"})
	body := []byte(`{"ip":"100.64.0.7","endpoint":"/api/books/17","method":"GET"}`)
	got := b.append(make([]byte, 0, 256), body)
	want := "POST /v1/check HTTP/1.1\r\n" +
		"Host: 127.0.0.1:8080\r\n" +
		"Content-Type: application/json\r\n" +
		"Content-Length: 61\r\n" +
		"\r\n" +
		`{"ip":"100.64.0.7","endpoint":"/api/books/17","method":"GET"}`
	if string(got) != want {
		t.Fatalf("request:\n%q\nwant:\n%q", got, want)
	}
	// And net/http, as the limiter's server, reads it as intended.
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(got)))
	if err != nil {
		t.Fatal(err)
	}
	read, _ := io.ReadAll(req.Body)
	if req.Method != "POST" || req.URL.Path != "/v1/check" || req.Host != "127.0.0.1:8080" ||
		req.Header.Get("Content-Type") != "application/json" || !bytes.Equal(read, body) {
		t.Fatalf("net/http reads %s %s host %s type %q body %q", req.Method, req.URL, req.Host, req.Header.Get("Content-Type"), read)
	}
}
