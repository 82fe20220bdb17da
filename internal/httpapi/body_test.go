package httpapi_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A body over the limit is answered 413 and the connection is closed after
// the answer, rather than the server reading the rest of it; a body at the
// limit is read whole.
func TestBodyLimit(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: ruleFor("fixed_window", "[{requests: 5, per: 1s}]")})
	send := func(body string) *http.Response {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		go func() { _, _ = conn.Write(buildPost("/v1/check", body)) }()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	head := `{"ip":"1.2.3.4","endpoint":"/a","tier":"`
	over := send(head + strings.Repeat("t", 64<<10-len(head)-1) + `"}`)
	if over.StatusCode != http.StatusRequestEntityTooLarge || !over.Close {
		t.Errorf("64 KiB + 1 byte: %d, close %v; want 413 and the connection closed", over.StatusCode, over.Close)
	}
	// 64 KiB exactly: read whole, then refused for its tier's length.
	at := send(head + strings.Repeat("t", 64<<10-len(head)-2) + `"}`)
	if at.StatusCode != http.StatusBadRequest || at.Close {
		t.Errorf("64 KiB: %d, close %v; want 400 (tier too long) on a connection kept open", at.StatusCode, at.Close)
	}
}
